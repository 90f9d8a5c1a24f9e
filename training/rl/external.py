"""External rollouts: the agent lives in the user's own code, which rolls out through an OpenAI-compatible
endpoint and hands finished groups back; the loop scores, reviews and trains them as it does any group.

The loop's side (a second rollout source beside the environments):
- `ExternalRollouts.collect` announces a step (`rollouts_wanted`: the scenarios, the adapter to sample with,
  the endpoint, the deadline), waits for each group in the `Inbox` (filled by whoever receives submissions: the
  web app's engine child from its stdin), and closes the step (`rollouts_closed`). A group that does not come
  within `group_timeout_s` (paused time not counted) is recorded as failed rollouts (`on_missing: skip`, the
  step trains on the groups that came, within `max_rollout_failures`) or fails the run (`on_missing: fail`).
- `assemble_trajectory` turns a submission into the engine's Trajectory from the calls recorded for it: every
  assistant turn must be an answer the model sampled, after exactly the messages (and tools) that call was sent,
  in a conversation that opens with the run's system prompt and its group's scenario; it trains on exactly the
  sampled token ids and log-probs (DESIGN §8.6); `allow_unsampled` lets other turns in, re-tokenised.
- `serve_http` gives an in-process inference engine an HTTP front, so the web app can forward to it.
- `sse_chunks` writes a completion as a `stream: true` answer.
Pure Python: no Django, no torch.
"""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from training.environments.base import opening_messages
from training.environments.external import ExternalOptions
from training.events import RolloutsClosed, RolloutsWanted
from training.types import Message, Scenario, TrainingError, Trajectory, TrajectoryGroup

__all__ = ["ExternalOptions", "ExternalRollouts", "Inbox", "StaleModel", "UnsampledTurn", "WrongContext",
           "assemble_trajectory", "group_opening", "serve_http", "sse_chunks"]


class Inbox:
    """Submitted groups by (step, group index), from any thread; the first group for a key wins (a group sent
    again after an engine restart changes nothing)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def put(self, step: int, group_index: int, trajectories: list[dict[str, Any]]) -> None:
        with self._lock:
            self._groups.setdefault((int(step), int(group_index)), list(trajectories))

    def take(self, step: int, group_index: int) -> list[dict[str, Any]] | None:
        with self._lock:
            return self._groups.pop((step, group_index), None)

    def drop_before(self, step: int) -> None:
        with self._lock:
            for key in [k for k in self._groups if k[0] < step]:
                del self._groups[key]


TRAJECTORY_FIELDS = ("scenario_id", "messages", "tools", "turn_token_ids", "turn_logprobs", "env_reward",
                     "metadata", "completion_tokens", "finish_reasons")


def trajectory_from_dict(data: dict[str, Any]) -> Trajectory:
    return Trajectory(**{k: data[k] for k in TRAJECTORY_FIELDS if k in data})


@dataclass
class ExternalRollouts:
    """The loop's rollout source for an `external` agent (see the module docstring)."""

    inbox: Inbox
    options: ExternalOptions
    base_url: str
    group_size: int
    system_prompt: str
    sampling: dict[str, Any]
    poll_s: float = 0.1

    async def collect(self, step: int, model: str, scenarios: list[Scenario], control: Any, sink: Any,
                      on_group: Any) -> None:
        """Asks for the step's groups and hands each to `on_group(index, group)` as it arrives (so scoring
        overlaps the wait); returns once every group came or the deadline passed."""
        self.inbox.drop_before(step)
        sink(RolloutsWanted(
            step=step, model=model, base_url=self.base_url, timeout_s=self.options.group_timeout_s,
            on_missing=self.options.on_missing, allow_unsampled=self.options.allow_unsampled,
            group_size=self.group_size, system_prompt=self.system_prompt, sampling=self.sampling,
            groups=[{"group_index": i, "scenario": {"id": s.id, "user_message": s.user_message,
                                                    "context": s.context, "metadata": s.metadata}}
                    for i, s in enumerate(scenarios)]))
        waiting = dict(enumerate(scenarios))
        received: list[int] = []
        pending: list[asyncio.Task] = []
        deadline = time.monotonic() + self.options.group_timeout_s
        while waiting:
            for index in list(waiting):
                submitted = self.inbox.take(step, index)
                if submitted is not None:
                    scenario = waiting.pop(index)
                    group = TrajectoryGroup(scenario=scenario,
                                            trajectories=[trajectory_from_dict(t) for t in submitted])
                    received.append(index)
                    pending.append(asyncio.ensure_future(on_group(index, group)))
            state = control.state()
            if not waiting or state == "cancel" or time.monotonic() > deadline:
                break
            slept = time.monotonic()
            await asyncio.sleep(self.poll_s)
            if state == "pause":  # a paused run's clients stop; the time paused is not theirs to lose
                deadline += time.monotonic() - slept
        missing = sorted(waiting)
        sink(RolloutsClosed(step=step, received=sorted(received), missing=missing))
        if missing and control.state() != "cancel":
            if self.options.on_missing == "fail":
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)  # none left running behind the error
                raise TrainingError(f"step {step}: no group came for group(s) {', '.join(map(str, missing))} "
                                    f"within {self.options.group_timeout_s:g} s (on_missing: fail)")
            reason = f"no group was submitted within {self.options.group_timeout_s:g} s"
            for index in missing:
                group = TrajectoryGroup(scenario=waiting[index], trajectories=[],
                                        errors=[reason] * self.group_size)
                pending.append(asyncio.ensure_future(on_group(index, group)))
        await asyncio.gather(*pending)


class UnsampledTurn(ValueError):
    """An assistant turn of a submission that the model never sampled for that trajectory."""


class StaleModel(ValueError):
    """A submission sampled with an adapter other than the one its step asked for."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts: the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _calls_of(message: Message) -> list[tuple[str, Any]]:
    return [(str((c.get("function") or {}).get("name")), _arguments((c.get("function") or {}).get("arguments")))
            for c in message.get("tool_calls") or []]


def same_answer(a: Message, b: Message) -> bool:
    """Whether two assistant messages say the same: text, and tool calls by name and parsed arguments (a framework
    may re-serialise arguments or drop an empty content)."""
    return _text(a.get("content")) == _text(b.get("content")) and _calls_of(a) == _calls_of(b)


def clean_message(message: dict[str, Any]) -> Message:
    """The chat fields the engine uses, from a message a client (or its framework) built."""
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"a message has role {role!r}; expected system, user, assistant or tool")
    clean: Message = {"role": role, "content": _text(message.get("content"))}
    if role == "assistant" and message.get("tool_calls"):
        clean["tool_calls"] = [
            {"id": str(c.get("id") or ""), "type": "function",
             "function": {"name": str((c.get("function") or {}).get("name")),
                          "arguments": a if isinstance(a := (c.get("function") or {}).get("arguments"), str)
                          else json.dumps(a)}}
            for c in message["tool_calls"]]
    if role == "tool":
        clean["tool_call_id"] = str(message.get("tool_call_id") or "")
    if message.get("name"):
        clean["name"] = str(message["name"])
    return clean


class WrongContext(UnsampledTurn):
    """An assistant turn that was sampled, but after other messages than the ones the submission puts before it
    (or a trajectory that does not open with its group's system prompt and scenario)."""


def same_message(a: Message, b: Message) -> bool:
    """Two cleaned messages in a conversation's context: an assistant's as `same_answer`, any other exactly."""
    if a.get("role") == b.get("role") == "assistant":
        return same_answer(a, b)
    return a == b


def first_difference(recorded: list[dict[str, Any]], prefix: list[Message]) -> int | None:
    """The index of the first message where a call's recorded messages and a submission's prefix differ (the
    shorter list's length when one only extends the other); None when they are the same conversation."""
    for i, (a, b) in enumerate(zip(recorded, prefix)):
        if not same_message(clean_message(a), b):
            return i
    return None if len(recorded) == len(prefix) else min(len(recorded), len(prefix))


def _opening_checked(conversation: list[Message], opening: list[dict[str, Any]]) -> None:
    for i, expected in enumerate(clean_message(m) for m in opening):
        if i >= len(conversation) or conversation[i] != expected:
            what = "the run's system prompt" if expected["role"] == "system" else "its group's scenario"
            raise WrongContext(f"message {i} ({expected['role']}) must be {what}, as the step gave it: a trajectory "
                               "trains only in the context it was rolled out in")


def group_opening(scenario: dict[str, Any], system_prompt: str) -> list[Message]:
    """The messages a trajectory of a group begins with: the run's system prompt and the group's scenario, as the
    built-in environments open (and as the client's `step.messages(scenario)` builds them)."""
    return opening_messages(Scenario(id=str(scenario.get("id", "")), user_message=str(scenario.get("user_message")
                                                                                        or ""),
                                     context=scenario.get("context") or None), system_prompt)


_NO_TURN_YET = object()


def _match(calls: list[dict[str, Any]], start: int, conversation: list[Message], index: int,
           tools: Any) -> tuple[int | None, dict[str, Any] | None, str | None]:
    """(call index, choice, why not) for the assistant message at `index`: the first call from `start` on that
    answered it after exactly the messages before it, with the same tools as the turns matched before it."""
    message, why = conversation[index], None
    for k in range(start, len(calls)):
        choice = next((c for c in calls[k]["choices"] if same_answer(c["message"], message)), None)
        if choice is None:
            continue
        differs = first_difference(calls[k]["request"]["messages"], conversation[:index])
        if differs is not None:
            why = why or (f"message {index} (assistant) was sampled after other messages than the ones before it "
                          f"here (message {differs} differs from what the call that produced it was sent)")
        elif tools is not _NO_TURN_YET and (calls[k]["request"].get("tools") or None) != tools:
            why = why or f"message {index} (assistant) was sampled with other tools than the turns before it"
        else:
            return k, choice, None
    return None, None, why


def assemble_trajectory(*, scenario_id: str, calls: list[dict[str, Any]], messages: list[dict[str, Any]] | None,
                        reward: float | None, metadata: dict[str, Any], model: str | None,
                        allow_unsampled: bool, opening: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A submitted trajectory as the engine's Trajectory dict, its assistant turns matched to recorded calls in
    order (see the module docstring). `calls`: oldest first, {"model", "request": {"messages", "tools"},
    "choices": [{"message", "token_ids", "logprobs", "finish_reason"}], "completion_tokens"}, where "messages"
    is everything the call was sent. A turn matches a call only when the messages before it are the ones that
    call was sent (the same tools too): its tokens were sampled in that context and no other. `opening`: the
    messages the trajectory must begin with (the run's system prompt and its group's scenario)."""
    if messages is None:
        if not calls:
            raise UnsampledTurn("the trajectory has no recorded call and no messages: make its calls inside "
                                "`trajectory()` (the X-Trajectory-Id header) or send its messages")
        last = calls[-1]
        messages = [*last["request"]["messages"], last["choices"][0]["message"]]
    conversation = [clean_message(m) for m in messages]
    if opening is not None:
        _opening_checked(conversation, opening)
    trajectory = Trajectory(scenario_id=scenario_id, messages=conversation, env_reward=reward,
                            metadata=dict(metadata))
    position, tools = 0, _NO_TURN_YET  # calls before `position` are used up: turns are matched in the order sampled
    for index, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        k, choice, why = _match(calls, position, conversation, index, tools)
        if k is None or choice is None:
            if not allow_unsampled:
                raise WrongContext(why) if why else UnsampledTurn(
                    f"message {index} (assistant) was not sampled through this run's endpoint for this trajectory: "
                    "only sampled turns train (the run does not allow others)")
            trajectory.turn_token_ids.append(None)
            trajectory.turn_logprobs.append(None)
            trajectory.finish_reasons.append("")
            continue
        call, position = calls[k], k + 1
        if model is not None and call["model"] != model:
            raise StaleModel(f"message {index} (assistant) was sampled with {call['model']!r}, but this step "
                             f"rolls out with {model!r}")
        tools = call["request"].get("tools") or None
        trajectory.tools = tools or trajectory.tools
        trajectory.turn_token_ids.append(choice.get("token_ids"))
        trajectory.turn_logprobs.append(choice.get("logprobs"))
        trajectory.finish_reasons.append(str(choice.get("finish_reason") or ""))
        trajectory.completion_tokens += len(choice.get("token_ids") or [])
    return trajectory.to_dict()


def sse_chunks(completion: dict[str, Any], *, include_usage: bool) -> bytes:
    """A chat.completion as the body of a `stream: true` answer: per choice its whole message in one delta, then
    its finish reason; the usage when asked; `[DONE]`."""
    base = {"id": completion.get("id", ""), "object": "chat.completion.chunk",
            "created": completion.get("created", int(time.time())), "model": completion.get("model", "")}
    chunks = []
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        chunks.append({**base, "choices": [{"index": choice.get("index", 0), "delta": delta,
                                            "logprobs": choice.get("logprobs"), "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": choice.get("index", 0), "delta": {},
                                            "finish_reason": choice.get("finish_reason") or "stop"}]})
    if include_usage and completion.get("usage"):
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


WILDCARDS = ("0.0.0.0", "::", "")


def serve_http(server: Any, host: str) -> tuple[str, Any]:
    """(base URL, stop) of the server's OpenAI-compatible HTTP endpoint: its own for a server behind HTTP; for an
    in-process engine, the local server's app in a thread, on `host` (a wildcard host is announced by name) under
    the same rule as the local server: a host other than loopback needs the deployment's token, which every
    request must then carry."""
    if not str(server.base_url).startswith("inprocess:"):
        url = urlsplit(server.base_url)
        if url.hostname in WILDCARDS:  # listening everywhere: reached by this machine's name
            url = url._replace(netloc=f"{socket.gethostname()}:{url.port}")
        return urlunsplit(url), lambda: None
    from training.servers.local import LocalApp
    from training.servers.serving import Limits, bind_refusal, inference_token, serve_in_thread

    token = inference_token()
    if refusal := bind_refusal(host, token):
        raise TrainingError(f"server.host: {refusal}")
    limits = Limits()
    port, stop = serve_in_thread(LocalApp(server.engine, token=token, limits=limits), host, limits,
                                 name="external-endpoint")
    name = socket.gethostname() if host in WILDCARDS else host
    return f"http://{name}:{port}/v1", stop
