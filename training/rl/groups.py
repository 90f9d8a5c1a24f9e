"""A step's groups: rolled out (one scenario, N trajectories at once), scored the moment they are done, turned
into GRPO advantages, and reported (the `group_scored` event, the step's metrics). The loop (training/rl/loop.py)
calls these in that order."""
from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from training.config import GRPOConfig
from training.environments import RolloutConfig
from training.events import GroupScored
from training.rl.group_client import GroupClient
from training.rl.grpo import group_advantages
from training.monitoring.health import reward_quartiles
from training.types import Scenario, Scorer, TrainingError, Trajectory, TrajectoryGroup, groups_by_role, sampled_nothing


async def rollout_groups(env: Any, client: Any, model: str, scenario: Scenario, config: RolloutConfig,
                         size: int) -> list[TrajectoryGroup]:
    """`size` episodes of one scenario, as one group per role the policy plays (one group for one player)."""
    client = GroupClient(client)  # identical turns of the group go out as one request with n choices
    results = await asyncio.gather(*(env.rollout(client, model, scenario, config) for _ in range(size)),
                                   return_exceptions=True)
    for r in results:
        if isinstance(r, TrainingError):
            raise r  # the engine itself is broken (e.g. a stale adapter): stop rather than train on it
    return groups_by_role(scenario, env.roles(config.options), results)


async def score_group(group: TrajectoryGroup, scorer: Scorer, grpo: GRPOConfig) -> tuple[float, float]:
    started = time.monotonic()
    if len(group.trajectories) >= 2:
        try:
            scores = await scorer(group)
            if len(scores) != len(group.trajectories):
                raise ValueError(f"the scorer returned {len(scores)} scores for {len(group.trajectories)}")
            for t, s in zip(group.trajectories, scores):
                t.reward, t.judge_score, t.explanation, t.criteria = s.reward, s.judge_score, s.explanation, s.criteria
        except Exception as err:  # noqa: BLE001 - recorded on the group and shown; the step goes on
            group.scoring_error = f"{type(err).__name__}: {err}"
            group.judge_outage = getattr(err, "outage", None)  # the judge's JudgeError says so (duck-typed)
    apply_scores(group, grpo)
    return started, time.monotonic()


def apply_scores(group: TrajectoryGroup, grpo: GRPOConfig) -> None:
    """Sets advantages from the rewards; a group with no spread in reward is skipped (no gradient). A trajectory
    that sampled no token is not rewarded: it has nothing to train, and its reward would shift the others'."""
    for t in group.trajectories:
        if sampled_nothing(t):
            t.reward = t.advantage = None
    usable = [t for t in group.trajectories if t.error is None and t.reward is not None]
    rewards = [t.reward for t in usable]
    group.skipped = len(usable) < 2 or max(rewards) - min(rewards) < 1e-9
    advantages = group_advantages(rewards, scale=grpo.scale_rewards, std_floor=grpo.std_floor).tolist() if usable \
        else []
    for t, a in zip(usable, advantages):
        t.advantage = 0.0 if group.skipped else a


def group_event(step: int, index: int, group: TrajectoryGroup) -> GroupScored:
    rewards = [t.reward for t in group.trajectories if t.reward is not None]
    return GroupScored(
        step=step, group_index=index, scenario_id=group.scenario.id, role=group.role,
        trajectories=[t.to_dict() for t in group.trajectories],
        reward_mean=statistics.fmean(rewards) if rewards else None,
        reward_std=statistics.pstdev(rewards) if rewards else None,
        skipped=group.skipped, errors=group.errors, scoring_error=group.scoring_error,
    )


def step_metrics(groups: list[TrajectoryGroup]) -> dict[str, float | None]:
    trajectories: list[Trajectory] = [t for g in groups for t in g.trajectories]
    metrics: dict[str, float | None] = {"reward_mean": None}  # always reported, null when nothing was scored
    rewards = [t.reward for t in trajectories if t.reward is not None]
    metrics |= _stats("reward", rewards) | reward_quartiles(rewards)  # the distribution, not only its mean
    metrics |= _stats("env", [t.env_reward for t in trajectories if t.env_reward is not None])
    metrics |= _stats("judge", [t.judge_score for t in trajectories if t.judge_score is not None])
    metrics["skipped_groups"] = sum(g.skipped for g in groups)
    metrics["rollout_errors"] = sum(len(g.errors) + sum(t.error is not None for t in g.trajectories) for g in groups)
    metrics["scoring_errors"] = sum(g.scoring_error is not None for g in groups)
    metrics["completion_tokens"] = sum(t.completion_tokens for t in trajectories)
    return metrics


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"{prefix}_mean": statistics.fmean(values), f"{prefix}_std": statistics.pstdev(values),
            f"{prefix}_min": min(values), f"{prefix}_max": max(values)}


def covered_seconds(spans: list[tuple[float, float]]) -> float:
    """Wall time covered by (start, end) spans that may overlap: concurrent scorings count once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
