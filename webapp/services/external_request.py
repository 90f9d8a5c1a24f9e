"""What a run's endpoint forwards (issue 33): an allow-list. The request the inference server gets is built here
from checked values only, never copied from the caller's body: a parameter that would change what the model
samples from (logit_bias, guided decoding, structured outputs, a chat template, another run's adapter, another
temperature...) would let text the run never samples pass as "sampled" and train with its log-probs. Anything
not listed is a 400 naming it.

Messages go out cleaned to the fields the trainer renders (training.rl.external.clean_message), so the server samples
from exactly the prompt training rebuilds; messages and tools in the key order the database gives them back
(`stored_order`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from training.rl.external import clean_message

MAX_STOPS, MAX_STOP_CHARS, MAX_TOP_LOGPROBS = 4, 256, 5
# Parameters a caller may send; each is checked below. `return_token_ids` only shapes the answer.
ALLOWED = frozenset({"messages", "tools", "tool_choice", "stop", "stream", "stream_options", "max_tokens",
                     "max_completion_tokens", "n", "logprobs", "top_logprobs", "model", "temperature", "top_p",
                     "return_token_ids"})
TOOL_KEYS, FUNCTION_KEYS = frozenset({"type", "function"}), frozenset({"name", "description", "parameters", "strict"})


@dataclass(frozen=True)
class RunLimits:
    """What the run allows: its current adapter and the checkpoints a caller may name, its sampling."""

    model: str
    checkpoints: frozenset[str]
    max_tokens: int
    group_size: int
    temperature: float
    top_p: float
    ignore_eos: bool
    max_messages: int
    # A run's endpoint samples at the run's temperature and top_p (training assumes them); a checkpoint served after
    # its run (serving_proxy.py, nothing recorded) lets the caller choose them within their ranges.
    fixed_sampling: bool = True


@dataclass
class ChatRequest:
    """A checked request: `forwarded` is the body the server gets; the rest shapes the answer."""

    forwarded: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    token_ids: bool = False
    checkpoint: str | None = field(default=None)  # a checkpoint asked for by name (not the current adapter)


def stored_order(value: Any) -> Any:
    """JSON with its object keys in the order PostgreSQL's jsonb gives them back (shorter keys first, then
    bytewise). The server is sent the request in this order, so that a chat template rendering tools with
    `tojson` samples from exactly the prompt the trainer renders from the recorded call (which the database
    hands back reordered); otherwise the trained tokens would follow a prompt the model never saw."""
    if isinstance(value, dict):
        return {k: stored_order(value[k]) for k in sorted(value, key=lambda k: (len(k.encode()), k.encode()))}
    if isinstance(value, list):
        return [stored_order(v) for v in value]
    return value


def _refuse(name: str, message: str) -> ValidationError:
    return ValidationError({name: [message]})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(body: dict[str, Any], name: str, low: int, high: int, why: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _refuse(name, f"`{name}` must be a whole number from {low} to {high} ({why})")
    return value


def _runs_own(body: dict[str, Any], name: str, value: float) -> float:
    """temperature / top_p: the run's. Training scores the sampled tokens with the run's sampling; a sample drawn
    with another value would train with log-probs of a distribution the run never samples from."""
    sent = body.get(name)
    if sent is None:
        return value
    if not _is_number(sent) or not math.isfinite(sent):
        raise _refuse(name, f"`{name}` must be a finite number: this run samples at {name} {value:g}")
    if abs(sent - value) > 1e-6:
        raise _refuse(name, f"this run samples at {name} {value:g} (its sampling.{name}, which training assumes): "
                            f"leave `{name}` out or send {value:g}")
    return value


def _callers(body: dict[str, Any], name: str, value: float, low: float, high: float, low_open: bool) -> float:
    """temperature / top_p of a served checkpoint: the caller's, within the range the servers take."""
    sent = body.get(name)
    if sent is None:
        return value
    if not _is_number(sent) or not math.isfinite(sent) or sent > high or sent < low or (low_open and sent == low):
        bound = f"more than {low:g}" if low_open else f"at least {low:g}"
        raise _refuse(name, f"`{name}` must be a finite number {bound} and at most {high:g}")
    return float(sent)


def _messages(body: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _refuse("messages", "send a chat completion request: a JSON object with a non-empty `messages` list")
    if len(raw) > limit:
        raise _refuse("messages", f"{len(raw)} messages; the limit is {limit} (STUDIO_EXTERNAL_MAX_MESSAGES)")
    out = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise _refuse("messages", f"messages[{i}] is not an object")
        content = message.get("content")
        if isinstance(content, list) and any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
            raise _refuse("messages", f"messages[{i}].content: only text parts are served (the run's model and "
                                      "its training read text)")
        if content is not None and not isinstance(content, (str, list)):
            raise _refuse("messages", f"messages[{i}].content must be text or a list of text parts")
        calls = message.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or any(
                not isinstance(c, dict) or not isinstance(c.get("function"), dict)
                or not isinstance(c["function"].get("name"), str) for c in calls)):
            raise _refuse("messages", f"messages[{i}].tool_calls: each needs a `function` with a `name`")
        try:
            out.append(clean_message(message))
        except ValueError as err:
            raise _refuse("messages", f"messages[{i}]: {err}") from None
    return out


def _tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    raw = body.get("tools")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise _refuse("tools", "`tools` must be a list of function tools")
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" \
                or not isinstance(tool.get("function"), dict):
            raise _refuse("tools", f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}")
        function = tool["function"]
        extra = sorted(set(tool) - TOOL_KEYS) or sorted(set(function) - FUNCTION_KEYS)
        if extra:
            raise _refuse("tools", f"tools[{i}]: `{extra[0]}` is not served (a tool has type and function: name, "
                                   "description, parameters, strict)")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise _refuse("tools", f"tools[{i}].function.name must be text")
    return [{"type": "function", "function": tool["function"]} for tool in raw]


def _stop(body: dict[str, Any]) -> list[str] | None:
    stop = body.get("stop")
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or any(
            not isinstance(s, str) or not 0 < len(s) <= MAX_STOP_CHARS for s in stops):
        raise _refuse("stop", f"`stop` must be text or a list of up to {MAX_STOPS} texts of 1 to {MAX_STOP_CHARS} "
                              "characters")
    return stops or None


def _non_finite(value: Any, path: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        return next((p for k, v in value.items() if (p := _non_finite(v, f"{path}.{k}"))), None)
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := _non_finite(v, f"{path}[{i}]"))), None)
    return None


def chat_request_checked(*, body: dict[str, Any], limits: RunLimits) -> ChatRequest:
    """The caller's body checked against the allow-list and the run's limits (400 naming the first parameter
    refused), and the request the server is sent."""
    unknown = sorted(set(body) - ALLOWED)
    if unknown:
        raise ValidationError({name: [f"`{name}` is not accepted by this run's endpoint: it forwards only "
                                      f"{', '.join(sorted(ALLOWED))}"] for name in unknown})
    messages, tools = _messages(body, limits.max_messages), _tools(body)
    model = body.get("model") or limits.model
    if not isinstance(model, str) or (model != limits.model and model not in limits.checkpoints):
        raise _refuse("model", f"this endpoint serves {limits.model!r}" + (
            " (its step's adapter) and the run's own earlier checkpoints by name (`<run>@<step>`)"
            if limits.fixed_sampling else "") + "; not another model")
    max_tokens = _integer(body, "max_tokens", 1, limits.max_tokens, "the run's sampling.max_tokens at most")
    max_completion = _integer(body, "max_completion_tokens", 1, limits.max_tokens,
                              "the run's sampling.max_tokens at most")
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise _refuse("max_completion_tokens", "send `max_tokens` or `max_completion_tokens`, not two values")
    n = _integer(body, "n", 1, limits.group_size, "the run's group size at most") or 1
    top_logprobs = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, f"{MAX_TOP_LOGPROBS} at most")
    for flag in ("stream", "logprobs", "return_token_ids"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise _refuse(flag, f"`{flag}` must be true or false")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage"}
                                or not isinstance(options.get("include_usage", False), bool)):
        raise _refuse("stream_options", "`stream_options` may hold `include_usage` (true or false), nothing else")
    choice = body.get("tool_choice")
    if choice is not None and choice != "auto":
        # "required" or a named function forces a call by guided decoding (tokens the run's sampling would not
        # give); "none" makes servers leave the tools out of the prompt that training renders with them.
        raise _refuse("tool_choice", "this run's endpoint serves `tool_choice: \"auto\"` only (or leave it out): "
                                     "a forced or disabled tool choice samples from another distribution or prompt")
    forwarded: dict[str, Any] = {
        "model": model, "messages": stored_order(messages), "max_tokens": max_tokens or max_completion
        or limits.max_tokens, "n": n, "logprobs": True, "return_token_ids": True,
        "temperature": _runs_own(body, "temperature", limits.temperature) if limits.fixed_sampling
        else _callers(body, "temperature", limits.temperature, 0.0, 2.0, False),
        "top_p": _runs_own(body, "top_p", limits.top_p) if limits.fixed_sampling
        else _callers(body, "top_p", limits.top_p, 0.0, 1.0, True)}
    if tools:
        forwarded["tools"] = stored_order(tools)
        if choice:
            forwarded["tool_choice"] = "auto"
    if stops := _stop(body):
        forwarded["stop"] = stops
    if top_logprobs:
        forwarded["top_logprobs"] = top_logprobs
    if limits.ignore_eos:
        forwarded["ignore_eos"] = True
    if (where := _non_finite(forwarded, "body")) is not None:
        name = where.split(".")[1].split("[")[0]
        raise _refuse(name, f"{where.removeprefix('body.')} is NaN or infinite, which JSON does not allow")
    return ChatRequest(forwarded=forwarded, messages=forwarded["messages"], tools=forwarded.get("tools"),
                       stream=bool(body.get("stream")), include_usage=bool((options or {}).get("include_usage")),
                       logprobs=bool(body.get("logprobs")), token_ids=bool(body.get("return_token_ids")),
                       checkpoint=model if model != limits.model else None)
