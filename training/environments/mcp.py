"""`mcp`: the agent uses the tools of an MCP server (stdio or streamable HTTP), through the official MCP SDK.

At launch the server's tools are listed, converted to the OpenAI `tools` format and validated: a server that
does not start or lists a tool with an invalid input schema refuses the run. In a rollout the agent's tool calls
run on the server and the results come back as `tool` messages, until the agent answers in plain text, calls
`answer_tool`, or reaches `max_turns`. The chat format and the assistant-only mask are the `tools`
environment's: only the agent's own turns train.

Sessions: one MCP session per trajectory, opened when the rollout starts and closed when it ends on every path
(answer, turn limit, fault, cancel). Trajectories never share server state, so stateful servers work and one
crashed session spoils one trajectory; the price is one handshake (for stdio, one process) per trajectory.
Calls to one server are limited to `max_concurrent_calls` at a time across the run's rollouts, and session starts
to `max_concurrent_starts`: a step's rollouts all start together, and as many stdio processes starting at once on
a busy worker could each exceed `startup_timeout_s`, which counts from when a start gets its turn.

A server fault mid-rollout (hang, crash, protocol garbage) ends that trajectory with `error` set (kept with its
messages, never trained on) and counts as a failed rollout under the run's `max_rollout_failures`. A tool's own
error is not a fault: the agent gets it as the tool's answer. `reward: reference` is a verifiable reward for
scenarios with a reference answer (the mailbox's): 0.75 if the answer contains the reference, plus 0.25 × the
overlap of the cited sources with `metadata.source_ids`.
"""
from __future__ import annotations

import json
import re
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from training.environments import register
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory, opening_messages
from training.environments.mcp_session import McpServerError, McpSession, ServerSpec, open_session
from training.types import Scenario, Trajectory


class McpOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    server: ServerSpec = Field(description='{"transport": "stdio", "command", "args", "env"} or '
                               '{"transport": "http", "url", "headers"}.')
    max_turns: int = Field(6, ge=1, le=64, description="Assistant turns before the rollout stops.")
    startup_timeout_s: float = Field(30.0, gt=0, le=600, description="Handshake and tool listing.")
    per_call_timeout_s: float = Field(30.0, gt=0, le=600, description="One tool call; longer is a hung server.")
    max_result_chars: int = Field(4000, ge=100, le=200_000, description="A longer tool result is cut.")
    max_concurrent_calls: int = Field(8, ge=1, le=256, description="Tool calls in flight to the server at once.")
    max_concurrent_starts: int = Field(4, ge=1, le=256, description="Sessions starting (for stdio: processes "
                                       "starting) at once; the others wait their turn before startup_timeout_s.")
    answer_tool: str | None = Field("answer", description="Calling this tool ends the rollout; its `text` and "
                                    "`sources` arguments are the answer. null: the answer is the last plain reply.")
    reward: Literal["none", "reference"] = Field("none", description="reference: verifiable reward against the "
                                                 "scenario's reference answer and metadata.source_ids.")


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def reference_reward(answer: str | None, sources: list[str], scenario: Scenario) -> float:
    if answer is None or not scenario.reference:
        return 0.0
    correct = bool(_words(scenario.reference)) and f" {_words(scenario.reference)} " in f" {_words(answer)} "
    expected, cited = set(scenario.metadata.get("source_ids") or []), set(sources)
    overlap = len(expected & cited) / len(expected | cited) if expected | cited else 0.0
    return 0.75 * correct + 0.25 * overlap


@register("mcp")
class McpEnvironment(Environment):
    Options = McpOptions

    def __init__(self) -> None:
        self._limit: anyio.Semaphore | None = None
        self._starts: anyio.Semaphore | None = None

    def _session(self, options: McpOptions) -> Any:
        if self._limit is None or self._starts is None:
            self._limit = anyio.Semaphore(options.max_concurrent_calls)
            self._starts = anyio.Semaphore(options.max_concurrent_starts)
        return open_session(options.server, startup_timeout_s=options.startup_timeout_s,
                            per_call_timeout_s=options.per_call_timeout_s,
                            max_result_chars=options.max_result_chars, limit=self._limit, starts=self._starts)

    async def launch(self, options: BaseModel) -> list[dict[str, Any]]:
        """Lists and validates the server's tools; a McpServerError refuses the run."""
        async with self._session(options) as session:  # type: ignore[arg-type]
            return session.tools

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        options: McpOptions = config.options  # type: ignore[assignment]
        trajectory = new_trajectory(scenario, opening_messages(scenario, config.system_prompt))
        answer: dict[str, Any] = {}
        try:
            async with self._session(options) as session:
                trajectory.tools = session.tools
                await self._converse(session, client, model, trajectory, config, answer)
        except McpServerError as err:  # this trajectory's server failed: recorded on it, the run goes on
            trajectory.error = f"{type(err).__name__}: {err}"
            trajectory.metadata["mcp_fault"] = type(err).__name__
        if options.reward == "reference":
            if "text" not in answer and trajectory.error is None:
                last = trajectory.messages[-1]
                if last["role"] == "assistant" and not last.get("tool_calls"):
                    answer["text"] = last["content"]
            trajectory.env_reward = reference_reward(answer.get("text"), answer.get("sources", []), scenario)
        return trajectory

    async def _converse(self, session: McpSession, client: Any, model: str, trajectory: Trajectory,
                        config: RolloutConfig, answer: dict[str, Any]) -> None:
        options: McpOptions = config.options  # type: ignore[assignment]
        names = {t["function"]["name"] for t in session.tools}
        for _ in range(options.max_turns):
            turn = await complete(client, model, trajectory.messages, config.sampling, tools=session.tools)
            add_turn(trajectory, turn)
            calls = turn.message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                name, raw = call["function"]["name"], call["function"]["arguments"]
                try:
                    arguments = json.loads(raw or "{}")
                except json.JSONDecodeError:
                    arguments = None
                if not isinstance(arguments, dict):
                    content = "error: the arguments must be a JSON object"
                elif name not in names:
                    content = f"error: no tool named {name[:80]!r}; tools: {', '.join(sorted(names))}"
                else:
                    content = (await session.call(name, arguments)).content
                    if name == options.answer_tool:
                        sources = arguments.get("sources")
                        answer.update(text=str(arguments.get("text", "")),
                                      sources=[str(s) for s in sources] if isinstance(sources, list) else [])
                trajectory.messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            if "text" in answer:
                return
        trajectory.metadata["turn_limit_reached"] = True
