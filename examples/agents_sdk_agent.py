"""An agent written with the OpenAI Agents SDK (`openai-agents`), trained by Rubric Studio through external
rollouts, without changing the SDK: its model is an `OpenAIChatCompletionsModel` on the run's client.

    python examples/agents_sdk_agent.py --url http://127.0.0.1:8000 --token rs_... --run 12

Every call the agent makes inside a `trajectory()` context is recorded for that trajectory; the calculator
tool runs here. The run's judge scores each group and the run trains on the tokens sampled here. See
docs/your-agent.md.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout without installing

from agents import (  # noqa: E402
    Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled,
)

from examples.openai_agent import calculate as _calculate  # noqa: E402
from rubric_studio_client import RunHandle, Step, StudioClient  # noqa: E402

MAX_TURNS = 4


@function_tool
def calculate(expression: str) -> str:
    """Evaluates an arithmetic expression such as '(2 + 3) * 4'."""
    return _calculate(expression)


def build_agent(run: RunHandle, step: Step) -> Agent:
    """The agent as its authors wrote it; only the model is the run's (this step's adapter, its endpoint)."""
    sampling = step.completion_args()
    return Agent(name="assistant", instructions=step.system_prompt or None, tools=[calculate],
                 model=OpenAIChatCompletionsModel(model=step.model, openai_client=run.openai),
                 model_settings=ModelSettings(temperature=sampling.get("temperature"), top_p=sampling.get("top_p"),
                                              max_tokens=sampling.get("max_tokens")))


async def rollout(run: RunHandle, step: Step, scenario: dict[str, Any]) -> float | None:
    """One trajectory: the SDK runs the agent to its final answer (tool calls included)."""
    user_message = step.messages(scenario)[-1]["content"]
    await Runner.run(build_agent(run, step), user_message, max_turns=MAX_TURNS)
    return None  # the run's judge scores the group


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the Rubric Studio web app, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token", required=True, help="a project API token (rs_...), from the project's Tokens page")
    parser.add_argument("--run", type=int, required=True, help="the run's number (in its page's address)")
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts at once")
    parser.add_argument("--client-id", default=None, help="this process's name on the run page")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    set_tracing_disabled(True)  # the SDK would otherwise send traces to OpenAI
    async with StudioClient(args.url, args.token, client_id=args.client_id) as studio:
        run = await studio.run(args.run)
        steps = await run.train(rollout, concurrency=args.concurrency)
        state = await run.state()
    print(f"run {args.run} is {state.status}; this process rolled out {steps} step(s)", flush=True)
    return 0 if state.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
