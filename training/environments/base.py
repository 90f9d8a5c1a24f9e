"""What an environment is, and the one call to the inference server that every environment makes.

An environment turns (client, model, scenario, config) into a Trajectory by talking to the server with plain
OpenAI-client code. It may set `env_reward` (a verifiable reward). Register your own with
`@training.environments.register("name")` on a subclass of `Environment`. An episode with several players
returns one trajectory per role (training/types.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from training.config import SamplingConfig
from training.types import Message, Scenario, TrainingError, Trajectory


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class RolloutConfig:
    system_prompt: str
    sampling: SamplingConfig
    options: BaseModel  # the environment's own validated options


class Environment:
    name: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions

    async def launch(self, options: BaseModel) -> Any:
        """Called once before a run's first rollout; raise a TrainingError to refuse the run (e.g. a tool server
        that does not start)."""
        return None

    async def rollout(self, client: Any, model: str, scenario: Scenario,
                      config: RolloutConfig) -> Trajectory | list[Trajectory]:
        """One episode. A game where the policy plays several parts returns one trajectory per role it played,
        each with `role` set to one of `roles(options)` (training/types.py)."""
        raise NotImplementedError

    @classmethod
    def roles(cls, options: BaseModel) -> list[str]:
        """The roles the policy plays in every episode with these options; groups form per (scenario, role) in
        this order. One player: [""]."""
        return [""]

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        """Whether rollouts with these options set `env_reward`, so a run can train without a judge; None when
        the environment does not say (a launch then cannot refuse a run that has no judge)."""
        return None


def opening_messages(scenario: Scenario, system_prompt: str) -> list[Message]:
    messages: list[Message] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    user = scenario.user_message if not scenario.context else f"{scenario.user_message}\n\nContext:\n{scenario.context}"
    messages.append({"role": "user", "content": user})
    return messages


@dataclass
class Turn:
    message: Message  # the assistant message, as it goes into the conversation
    token_ids: list[int] | None
    completion_tokens: int
    finish_reason: str
    logprobs: list[float] | None = None  # the server's log-prob of each sampled token


async def complete(client: Any, model: str, messages: list[Message], sampling: SamplingConfig,
                   tools: list[dict] | None = None) -> Turn:
    """One assistant turn. Asks the server for the sampled token ids (and their log-probs) so training uses
    exactly those and can measure how far its own log-probs are from the sampler's."""
    kwargs: dict[str, Any] = {}
    if tools:
        kwargs["tools"] = tools
    response = await client.chat.completions.create(
        model=model, messages=messages, temperature=sampling.temperature, top_p=sampling.top_p,
        max_tokens=sampling.max_tokens, logprobs=True,
        extra_body={"return_token_ids": True, **({"ignore_eos": True} if sampling.ignore_eos else {})}, **kwargs,
    )
    if response.model != model:  # a server that quietly answers with another adapter would corrupt training
        raise TrainingError(f"asked the server for model {model!r} but it answered as {response.model!r}")
    choice = response.choices[0]
    message: Message = {"role": "assistant", "content": choice.message.content or ""}
    if choice.message.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in choice.message.tool_calls
        ]
    token_ids = (choice.model_extra or {}).get("token_ids")
    usage = response.usage.completion_tokens if response.usage else len(token_ids or [])
    content = choice.logprobs.content if choice.logprobs and choice.logprobs.content else None
    logprobs = [float(c.logprob) for c in content] if content else None
    return Turn(message, token_ids, usage, choice.finish_reason or "stop", logprobs)


def new_trajectory(scenario: Scenario, messages: list[Message], tools: list[dict] | None = None) -> Trajectory:
    return Trajectory(scenario_id=scenario.id, messages=messages, tools=tools)


def add_turn(trajectory: Trajectory, turn: Turn) -> None:
    trajectory.messages.append(turn.message)
    trajectory.turn_token_ids.append(turn.token_ids)
    trajectory.turn_logprobs.append(turn.logprobs)
    trajectory.finish_reasons.append(turn.finish_reason)
    trajectory.completion_tokens += turn.completion_tokens
