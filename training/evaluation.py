"""Held-out evaluation: does the checkpoint beat the model it started from?

Training rewards are relative scores inside a group; they cannot say whether step 200 beats step 0. Here the
current checkpoint and the base model (adapter disabled) answer scenarios that training never sees. For each
scenario, all their answers go into ONE group, in a shuffled order, and the run's scorer (the judge, or the
environment's reward) scores it. Every (checkpoint answer, base answer) pair of a scenario is one comparison:
a win counts 1, a tie 1/2. The win rate comes with a Wilson score interval over the comparisons.

`split_scenarios` and `compare_group`/`win_rate_summary` are pure; `Evaluator.evaluate` is the async step the
loop calls every `every` steps and at the end.
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
import random
import statistics
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from training.types import Scenario, Scorer, Trajectory, TrajectoryGroup

CHECKPOINT, BASE = "checkpoint", "base"
TIE_EPS = 1e-9


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    held_out_fraction: float = Field(
        0.0, ge=0.0, lt=1.0, description="Fraction of the scenarios kept out of training and used for evaluation "
        "(a seeded split by id). 0 with no held_out_ids: no evaluation.")
    held_out_ids: list[str] = Field(
        default_factory=list, description="Scenario ids held out explicitly (added to the fraction's).")
    every: int = Field(10, ge=1, description="Evaluate after every N-th step (and after the last one).")
    samples: int = Field(2, ge=1, le=64, description="Answers per model per held-out scenario.")
    temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="Sampling temperature for evaluation; None uses the run's.")

    @property
    def enabled(self) -> bool:
        return self.held_out_fraction > 0 or bool(self.held_out_ids)


def split_scenarios(scenarios: list[Scenario], config: EvaluationConfig,
                    seed: int) -> tuple[list[Scenario], list[Scenario]]:
    """(train, held_out). A scenario is held out when its id is listed or its seeded hash falls under the
    fraction: the split depends on the id alone, so adding scenarios never moves an existing one."""
    listed = set(config.held_out_ids)
    unknown = listed - {s.id for s in scenarios}
    if unknown:
        raise ValueError(f"evaluation.held_out_ids names unknown scenarios: {sorted(unknown)}")

    def held(s: Scenario) -> bool:
        return s.id in listed or zlib.crc32(f"{seed}:{s.id}".encode()) / 2**32 < config.held_out_fraction

    held_out = [s for s in scenarios if held(s)]
    if config.held_out_fraction > 0 and not held_out:  # too few scenarios for the fraction: hold out one
        held_out = [min(scenarios, key=lambda s: zlib.crc32(f"{seed}:{s.id}".encode()))]
    train = [s for s in scenarios if s not in held_out]
    if config.enabled and not train:
        raise ValueError("the evaluation split leaves no scenario to train on")
    return train, held_out


def wilson_interval(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default); ties count half, so `wins` may be x.5."""
    if n == 0:
        return 0.0, 1.0
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class ScenarioComparison:
    scenario_id: str
    wins: float  # ties counted half
    comparisons: int
    checkpoint_rewards: list[float]
    base_rewards: list[float]
    checkpoint_env: list[float] = field(default_factory=list)
    base_env: list[float] = field(default_factory=list)


def compare_group(scenario_id: str, sides: list[str], trajectories: list[Trajectory]) -> ScenarioComparison | None:
    """Pairwise comparison of one scored evaluation group; None when a side has no scored answer."""
    by_side: dict[str, list[Trajectory]] = {CHECKPOINT: [], BASE: []}
    for side, t in zip(sides, trajectories):
        if t.reward is not None and t.error is None:
            by_side[side].append(t)
    mine, theirs = by_side[CHECKPOINT], by_side[BASE]
    if not mine or not theirs:
        return None
    wins = 0.0
    for a in mine:
        for b in theirs:
            diff = a.reward - b.reward  # type: ignore[operator]
            wins += 1.0 if diff > TIE_EPS else 0.5 if abs(diff) <= TIE_EPS else 0.0
    return ScenarioComparison(
        scenario_id=scenario_id, wins=wins, comparisons=len(mine) * len(theirs),
        checkpoint_rewards=[t.reward for t in mine], base_rewards=[t.reward for t in theirs],  # type: ignore[misc]
        checkpoint_env=[t.env_reward for t in mine if t.env_reward is not None],
        base_env=[t.env_reward for t in theirs if t.env_reward is not None])


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def win_rate_summary(comparisons: list[ScenarioComparison]) -> dict[str, Any]:
    """The evaluation's metrics: win rate (ties half), its 95 % Wilson interval and the env rewards per side."""
    n = sum(c.comparisons for c in comparisons)
    wins = sum(c.wins for c in comparisons)
    low, high = wilson_interval(wins, n)
    return {
        "eval_win_rate": wins / n if n else None, "eval_ci_low": low if n else None,
        "eval_ci_high": high if n else None, "eval_comparisons": n, "eval_scenarios": len(comparisons),
        "eval_reward_checkpoint": _mean([r for c in comparisons for r in c.checkpoint_rewards]),
        "eval_reward_base": _mean([r for c in comparisons for r in c.base_rewards]),
        "eval_env_checkpoint": _mean([r for c in comparisons for r in c.checkpoint_env]),
        "eval_env_base": _mean([r for c in comparisons for r in c.base_env]),
    }


class Evaluator:
    """Runs the held-out evaluation for one run. The base model's answers never change, so they are rolled
    out once and re-scored in each new group (a judge sees them next to the current checkpoint's answers)."""

    def __init__(self, *, config: EvaluationConfig, held_out: list[Scenario], env: Any, rollout_config: Any,
                 scorer: Scorer, total_steps: int, seed: int) -> None:
        self.config, self.held_out, self.env, self.scorer = config, held_out, env, scorer
        self.total_steps, self.seed = total_steps, seed
        self.rollout_config = rollout_config
        if config.temperature is not None:
            sampling = rollout_config.sampling.model_copy(update={"temperature": config.temperature})
            self.rollout_config = dataclasses.replace(rollout_config, sampling=sampling)
        self._base: dict[str, list[Trajectory]] = {}

    def due(self, step: int) -> bool:
        return bool(self.held_out) and (step % self.config.every == 0 or step == self.total_steps)

    async def _answers(self, client: Any, model: str, scenario: Scenario) -> list[Trajectory]:
        results = await asyncio.gather(*(self.env.rollout(client, model, scenario, self.rollout_config)
                                         for _ in range(self.config.samples)), return_exceptions=True)
        return [r for r in results if isinstance(r, Trajectory)]

    async def _scenario(self, step: int, client: Any, model: str, base_model: str,
                        scenario: Scenario) -> ScenarioComparison | None:
        if scenario.id not in self._base:
            self._base[scenario.id] = await self._answers(client, base_model, scenario)
        entries = [(CHECKPOINT, t) for t in await self._answers(client, model, scenario)]
        entries += [(BASE, copy.deepcopy(t)) for t in self._base[scenario.id]]
        # Shuffled so that a judge's position bias cannot favour either side.
        random.Random(zlib.crc32(f"{self.seed}:{step}:{scenario.id}".encode())).shuffle(entries)
        sides, trajectories = [s for s, _ in entries], [t for _, t in entries]
        if len(trajectories) < 2:
            return None
        try:
            scores = await self.scorer(TrajectoryGroup(scenario=scenario, trajectories=trajectories))
        except Exception:  # noqa: BLE001 - an unscorable scenario is left out and counted
            return None
        for t, s in zip(trajectories, scores):
            t.reward, t.judge_score = s.reward, s.judge_score
        return compare_group(scenario.id, sides, trajectories)

    async def evaluate(self, step: int, client: Any, *, model: str, base_model: str) -> dict[str, Any]:
        results = await asyncio.gather(*(self._scenario(step, client, model, base_model, s) for s in self.held_out))
        done = [r for r in results if r is not None]
        return {"step": step, "model": model, "baseline": base_model, **win_rate_summary(done),
                "eval_unscored": len(results) - len(done), "scenarios": [asdict(r) for r in done]}
