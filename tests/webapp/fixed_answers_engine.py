"""The real engine (training:train) with a test environment whose answers are fixed instead of sampled, so
two runs roll out exactly the same trajectories and any difference in what they train is the review's doing.
Selected with STUDIO_ENGINE=tests.webapp.fixed_answers_engine:train (the engine process imports it, which
registers the environment; users register theirs the same way)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from training import train  # noqa: F401  (the entry point)
from training.environments import register
from training.environments.base import Environment, RolloutConfig, new_trajectory, opening_messages
from training.types import Scenario, Trajectory

ANSWERS = ["move left", "move up then right", "I would rather not play", "down"]
REWARDS = [0.8, 0.6, 0.1, 0.4]


@register("fixed_answers")
class FixedAnswers(Environment):
    """The k-th rollout of a scenario answers ANSWERS[k % 4] with env reward REWARDS[k % 4]. The index is taken
    before the first await, and the loop starts a group's rollouts in order, so it is deterministic."""

    def __init__(self) -> None:
        self._count: dict[str, int] = defaultdict(int)

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        k = self._count[scenario.id] % len(ANSWERS)
        self._count[scenario.id] += 1
        trajectory = new_trajectory(scenario, opening_messages(scenario, config.system_prompt))
        trajectory.messages.append({"role": "assistant", "content": ANSWERS[k]})
        trajectory.turn_token_ids.append(None)
        trajectory.completion_tokens = len(ANSWERS[k])
        trajectory.env_reward = REWARDS[k]
        return trajectory
