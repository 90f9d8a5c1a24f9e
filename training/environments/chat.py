"""`chat`: the agent answers a scenario; optionally several turns with scripted follow-up user messages.

No verifiable reward: a judge scores it (unless the scenario's reference answer is used with `exact_match`).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from training.environments import register
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory, opening_messages
from training.types import Scenario, Trajectory


class ChatOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    follow_ups: list[str] = Field(default_factory=list, description="User messages sent after each answer.")
    exact_match: bool = Field(False, description="env reward 1/0: does the answer contain the reference?")


@register("chat")
class ChatEnvironment(Environment):
    Options = ChatOptions

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return bool(options.get("exact_match"))

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        options: ChatOptions = config.options  # type: ignore[assignment]
        follow_ups = list(scenario.metadata.get("follow_ups", options.follow_ups))
        trajectory = new_trajectory(scenario, opening_messages(scenario, config.system_prompt))
        while True:
            add_turn(trajectory, await complete(client, model, trajectory.messages, config.sampling))
            if not follow_ups:
                break
            trajectory.messages.append({"role": "user", "content": follow_ups.pop(0)})
        if options.exact_match and scenario.reference is not None:
            answer = trajectory.messages[-1]["content"] or ""
            trajectory.env_reward = float(scenario.reference.strip().lower() in answer.lower())
        return trajectory
