"""`tools`: function calling. The agent may call declared tools (backed by Python functions) until it answers
in plain text or reaches the turn limit. Tool calls and results stay in the trajectory's messages.

Tools are Python callables registered with `register_tool` (built in: `calculator`, `lookup`), or named in the
options as "package.module:function" with a JSON-schema description.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import operator
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from training.environments import register
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory, opening_messages
from training.types import Scenario, TrainingError, Trajectory


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]  # called with the arguments and, if it accepts it, `scenario=`

    def schema(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


_TOOLS: dict[str, Tool] = {}


def register_tool(tool: Tool) -> Tool:
    _TOOLS[tool.name] = tool
    return tool


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.USub: operator.neg, ast.Mod: operator.mod}


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arith(node.left), _arith(node.right)
        # A sampled 9**9**9 would compute for hours and block every rollout sharing the event loop.
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise ValueError("powers are limited to exponents of at most 64 and bases of at most 1e6")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError("only numbers and + - * / % ** are allowed")


def calculator(expression: str) -> str:
    return str(_arith(ast.parse(expression, mode="eval").body))


def lookup(key: str, scenario: Scenario) -> str:
    documents = scenario.metadata.get("documents", {})
    return str(documents.get(key, f"no document named {key!r}; available: {', '.join(documents) or 'none'}"))


register_tool(Tool("calculator", "Evaluate an arithmetic expression.",
                   {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
                   calculator))
register_tool(Tool("lookup", "Read a document of the scenario by name.",
                   {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}, lookup))


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    function: str = Field(description="package.module:function")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolsOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str] = Field(default_factory=lambda: ["calculator", "lookup"], description="Registered tools.")
    custom_tools: list[ToolSpec] = Field(default_factory=list)
    max_turns: int = Field(4, ge=1, le=64, description="Assistant turns before the rollout stops.")


def resolve_tools(options: ToolsOptions) -> list[Tool]:
    tools = []
    for name in options.tools:
        if name not in _TOOLS:
            raise TrainingError(f"unknown tool {name!r}; registered: {', '.join(sorted(_TOOLS))}")
        tools.append(_TOOLS[name])
    for spec in options.custom_tools:
        module, _, attr = spec.function.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError) as err:
            raise TrainingError(f"tool {spec.name!r}: cannot import {spec.function!r}: {err}") from None
        tools.append(Tool(spec.name, spec.description, spec.parameters, fn))
    return tools


def call_tool(tool: Tool, arguments: str, scenario: Scenario) -> str:
    """Runs a tool; whatever goes wrong becomes the tool's answer, as it would for a real agent."""
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            return "error: arguments must be a JSON object"
        if "scenario" in inspect.signature(tool.function).parameters:
            args["scenario"] = scenario
        return str(tool.function(**args))
    except Exception as err:  # noqa: BLE001 - the agent sees the error and may recover
        return f"error: {type(err).__name__}: {err}"


@register("tools")
class ToolsEnvironment(Environment):
    Options = ToolsOptions

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return False

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        options: ToolsOptions = config.options  # type: ignore[assignment]
        tools = {t.name: t for t in resolve_tools(options)}
        schemas = [t.schema() for t in tools.values()]
        trajectory = new_trajectory(scenario, opening_messages(scenario, config.system_prompt), schemas)
        for _ in range(options.max_turns):
            turn = await complete(client, model, trajectory.messages, config.sampling, tools=schemas)
            add_turn(trajectory, turn)
            calls = turn.message.get("tool_calls") or []
            if not calls:
                break
            for call in calls:
                fn = call["function"]
                tool = tools.get(fn["name"])
                result = call_tool(tool, fn["arguments"], scenario) if tool else f"error: no tool named {fn['name']!r}"
                trajectory.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        else:
            trajectory.metadata["turn_limit_reached"] = True
        return trajectory
