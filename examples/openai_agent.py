"""An agent written with the plain `openai` client, trained by Rubric Studio through external rollouts.

    python examples/openai_agent.py --url http://127.0.0.1:8000 --token rs_... --run 12

For each step the run asks for, every scenario is answered `group_size` times through the run's
OpenAI-compatible endpoint; the model may call a calculator, which runs here, in this process. Each finished
group goes back to the run, whose judge scores it; the run trains on exactly the tokens sampled here. The
process ends when the run does (completed, failed or cancelled). See docs/your-agent.md.
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import json
import logging
import operator
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout without installing

from rubric_studio_client import RunHandle, Step, StudioClient  # noqa: E402

MAX_TURNS = 4
CALCULATOR = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluates an arithmetic expression such as '(2 + 3) * 4'.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """The tool: arithmetic only (numbers and + - * / **), never Python's eval."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * / ** are allowed")
    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as err:
        return f"error: {err}"


async def rollout(run: RunHandle, step: Step, scenario: dict[str, Any]) -> float | None:
    """One trajectory: the model answers, calling the calculator as often as it likes (up to MAX_TURNS calls).
    Every call goes through `run.openai` inside the trajectory() context that `run.train` opened, so the run
    records it; the final conversation is the last call's request and answer, so nothing needs returning."""
    messages = step.messages(scenario)
    for _ in range(MAX_TURNS):
        reply = await run.openai.chat.completions.create(messages=messages, tools=[CALCULATOR],
                                                         **step.completion_args())
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            if call.function.name != "calculate":
                result = f"error: there is no tool named {call.function.name!r}"
            else:
                try:
                    result = calculate(str(json.loads(call.function.arguments or "{}").get("expression", "")))
                except (json.JSONDecodeError, AttributeError):
                    result = "error: the arguments are not a JSON object"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None  # no reward of our own: the run's judge scores the group


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
