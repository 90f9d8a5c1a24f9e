"""An agent written with LangGraph (a ReAct graph on LangChain's `ChatOpenAI`), trained by Rubric Studio through
external rollouts, without changing LangGraph: the chat model talks to the run's endpoint through the run's
HTTP client, which tags each call with its trajectory.

    pip install langgraph langchain-openai   # not in requirements.lock: this example only
    python examples/langgraph_agent.py --url http://127.0.0.1:8000 --token rs_... --run 12

The calculator tool runs here. The run's judge scores each group and the run trains on the tokens sampled
here. See docs/your-agent.md.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout without installing

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

from examples.openai_agent import calculate as _calculate  # noqa: E402
from rubric_studio_client import RunHandle, Step, StudioClient  # noqa: E402

MAX_TURNS = 4


@tool
def calculate(expression: str) -> str:
    """Evaluates an arithmetic expression such as '(2 + 3) * 4'."""
    return _calculate(expression)


def build_agent(run: RunHandle, step: Step) -> Any:
    """The graph as its authors wrote it; only the chat model is the run's (this step's adapter, its endpoint,
    its HTTP client that tags the calls, its sampling settings)."""
    sampling = step.completion_args()
    model = ChatOpenAI(model=step.model, base_url=run.openai_base_url, api_key=run.token,
                       http_async_client=run.httpx_client(), temperature=sampling.get("temperature"),
                       top_p=sampling.get("top_p"), max_tokens=sampling.get("max_tokens"), max_retries=0)
    return create_react_agent(model, [calculate], prompt=step.system_prompt or None)


async def rollout(run: RunHandle, step: Step, scenario: dict[str, Any]) -> float | None:
    """One trajectory: the graph runs to its final answer (tool calls included), inside the trajectory() context
    that `run.train` opened."""
    user_message = step.messages(scenario)[-1]["content"]
    await build_agent(run, step).ainvoke({"messages": [{"role": "user", "content": user_message}]},
                                         {"recursion_limit": 2 * MAX_TURNS + 1})
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
    async with StudioClient(args.url, args.token, client_id=args.client_id) as studio:
        run = await studio.run(args.run)
        steps = await run.train(rollout, concurrency=args.concurrency)
        state = await run.state()
    print(f"run {args.run} is {state.status}; this process rolled out {steps} step(s)", flush=True)
    return 0 if state.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
