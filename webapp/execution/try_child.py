"""The rollouts of one Try it session (issue 37): `python -m webapp.execution.try_child`, started by trying.py.

It never imports Django. The agent's environment rolls out the session's scenario once per column against the
project's inference server, exactly as in training (the same `rollout`, so function tools, an MCP server and a
game run as they do there); every assistant turn is written out as it arrives, so the page fills turn by turn.
Protocol: stdin, one line: {"base_url", "token", "environment": {"kind", "options"}, "system_prompt",
"sampling": {...}, "scenario": {...}, "models": [served name per column], "timeout_s"}. stdout: one JSON line per
turn as its text streams in (the first text at once, then every REPORT_EVERY_S) and once whole, {"column": i,
"status": "answering", "messages": [...], "tools": [...] | null}, and one per column at its end, {"column": i,
"status": "done" | "failed", "messages", "tools", "error", "seconds"}.
"""
from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.types import Scenario, first_side
from webapp.execution.streamed_completion import StreamedCompletion, assistant_message

_out = threading.Lock()
REPORT_EVERY_S = 0.1  # each report is a database write of the session by the parent


def emit(record: dict[str, Any]) -> None:
    line = json.dumps(record, default=str)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class _Completions:
    """`client.chat.completions` that streams each answer and reports it as it grows, with the conversation it
    continues; the environment is handed the whole completion, as without streaming (streamed_completion.py)."""

    def __init__(self, inner: Any, column: int) -> None:
        self.inner, self.column = inner, column

    def _report(self, kwargs: dict[str, Any], message: dict[str, Any]) -> None:
        emit({"column": self.column, "status": "answering", "messages": list(kwargs.get("messages") or []) + [message],
              "tools": kwargs.get("tools")})

    async def create(self, **kwargs: Any) -> Any:
        if kwargs.get("n") not in (None, 1) or kwargs.get("stream"):  # several answers, or a stream: as asked
            response = await self.inner.create(**kwargs)
            self._report(kwargs, assistant_message(response))
            return response
        stream = await self.inner.create(**kwargs, stream=True, stream_options={"include_usage": True})
        parts, reported = StreamedCompletion(), 0.0
        async for chunk in stream:
            if parts.add(chunk) and time.monotonic() - reported >= REPORT_EVERY_S:
                reported = time.monotonic()  # the first text goes out at once; then a few times a second
                self._report(kwargs, parts.message())
        response = parts.completion()
        self._report(kwargs, assistant_message(response))
        return response


class _Chat:
    def __init__(self, inner: Any, column: int) -> None:
        self.completions = _Completions(inner.chat.completions, column)


class ReportingClient:
    """The OpenAI client an environment is given: the real one, with its completions reported as they come."""

    def __init__(self, inner: Any, column: int) -> None:
        self.chat = _Chat(inner, column)


async def _column(env: Any, client: Any, column: int, model: str, scenario: Scenario, config: RolloutConfig,
                  timeout_s: float) -> None:
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            trajectory = first_side(await env.rollout(ReportingClient(client, column), model, scenario, config))
        emit({"column": column, "status": "done", "messages": trajectory.messages, "tools": trajectory.tools,
              "error": "", "seconds": time.monotonic() - started})
    except Exception as err:  # noqa: BLE001 - the column shows it; the other columns go on
        reason = f"no answer within {timeout_s:g} s" if isinstance(err, TimeoutError) else f"{type(err).__name__}: {err}"
        emit({"column": column, "status": "failed", "error": reason, "seconds": time.monotonic() - started})


async def main(spec: dict[str, Any]) -> None:
    from openai import AsyncOpenAI

    environment = spec["environment"]
    kind = environment["kind"] if environment["kind"] != "external" else "chat"  # the user's own code: one answer
    env = get_environment(kind)
    options = parse_options(env, (environment.get("options") or {}) if kind == environment["kind"] else {})
    config = RolloutConfig(system_prompt=spec["system_prompt"], options=options,
                           sampling=SamplingConfig.model_validate(spec["sampling"]))
    scenario = Scenario(**spec["scenario"])
    client = AsyncOpenAI(base_url=spec["base_url"], api_key=spec["token"], max_retries=0, timeout=spec["timeout_s"])
    await env.launch(options)  # as the loop does: a tool server that does not start says so once
    await asyncio.gather(*(_column(env, client, i, model, scenario, config, spec["timeout_s"])
                           for i, model in enumerate(spec["models"])))


if __name__ == "__main__":
    from training.environments.process_guard import hide_environment

    hide_environment()  # the MCP header values in its environment: never readable by the tools it starts
    try:
        asyncio.run(main(json.loads(sys.stdin.readline())))
    except Exception as err:  # noqa: BLE001 - the parent shows the reason on the session
        emit({"column": None, "status": "failed", "error": f"{type(err).__name__}: {err}"})
        sys.exit(1)
