"""Held-out evaluation: does the checkpoint beat the model it started from?

Training rewards are relative scores inside a group; they cannot say whether step 200 beats step 0. Here the
current checkpoint and the base model (adapter disabled) answer scenarios that training never sees. For each
scenario, all their answers go into ONE group, in a shuffled order, and the run's scorer (the judge, or the
environment's reward) scores it. Every (checkpoint answer, base answer) pair of a scenario is one comparison:
a win counts 1, a tie 1/2.

The sample is the scenarios, not the pairs: the pairs of one scenario share the same answers. So the 95 %
interval is a bootstrap over scenarios (resample the scenarios, and within each its answers of either side),
deterministic given a seed. The Wilson interval over pairs is kept only to compare with (bench/eval_calibration.py:
it covers 0.5 far less often than 95 % of the time when the base plays itself). The base model's answers are
sampled afresh at every evaluation, so one lucky draw cannot shift every later win rate (docs/evaluation.md).

`split_scenarios`, `compare_group`, `bootstrap_interval` and `win_rate_summary` are pure; `Evaluator.evaluate`
is the async step the loop calls every `every` steps and at the end.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import statistics
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

from training.config.evaluation import EvaluationConfig
from training.types import Scenario, Scorer, Trajectory, TrajectoryGroup, first_side

CHECKPOINT, BASE = "checkpoint", "base"
TIE_EPS = 1e-9


def split_scenarios(scenarios: list[Scenario], config: EvaluationConfig, seed: int, *,
                    require_train: bool = True) -> tuple[list[Scenario], list[Scenario]]:
    """(train, held_out). A scenario is held out when its id is listed or its seeded hash falls under the
    fraction: the split depends on the id alone, so adding scenarios never moves an existing one.
    `require_train=False`: every scenario may be held out (an SFT run trains on conversations, not on these)."""
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
    if config.enabled and not train and require_train:
        raise ValueError("the evaluation split leaves no scenario to train on")
    return train, held_out


def wilson_interval(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default); ties count half, so `wins` may be x.5.
    Not the evaluation's interval (it treats every pair as independent); kept for the A/A comparison."""
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
    # Format apart from skill, where the environment says (metadata `well_formed`): per answer whether it was
    # well-formed, and the env rewards of the well-formed ones (a win over the base may be the format alone).
    checkpoint_formed: list[bool] = field(default_factory=list)
    base_formed: list[bool] = field(default_factory=list)
    checkpoint_env_formed: list[float] = field(default_factory=list)
    base_env_formed: list[float] = field(default_factory=list)


def pair_wins(mine: list[float], theirs: list[float]) -> float:
    """Wins of `mine` over `theirs` over all pairs; a tie counts half."""
    wins = 0.0
    for a in mine:
        for b in theirs:
            diff = a - b
            wins += 1.0 if diff > TIE_EPS else 0.5 if abs(diff) <= TIE_EPS else 0.0
    return wins


def compare_group(scenario_id: str, sides: list[str], trajectories: list[Trajectory]) -> ScenarioComparison | None:
    """Pairwise comparison of one scored evaluation group; None when a side has no scored answer."""
    by_side: dict[str, list[Trajectory]] = {CHECKPOINT: [], BASE: []}
    for side, t in zip(sides, trajectories):
        if t.reward is not None and t.error is None:
            by_side[side].append(t)
    mine, theirs = by_side[CHECKPOINT], by_side[BASE]
    if not mine or not theirs:
        return None
    return ScenarioComparison(
        scenario_id=scenario_id,
        wins=pair_wins([a.reward for a in mine], [b.reward for b in theirs]),  # type: ignore[misc]
        comparisons=len(mine) * len(theirs),
        checkpoint_rewards=[t.reward for t in mine], base_rewards=[t.reward for t in theirs],  # type: ignore[misc]
        checkpoint_env=[t.env_reward for t in mine if t.env_reward is not None],
        base_env=[t.env_reward for t in theirs if t.env_reward is not None],
        checkpoint_formed=_formed(mine), base_formed=_formed(theirs),
        checkpoint_env_formed=_env_formed(mine), base_env_formed=_env_formed(theirs))


def _formed(trajectories: list[Trajectory]) -> list[bool]:
    return [bool(t.metadata["well_formed"]) for t in trajectories if "well_formed" in t.metadata]


def _env_formed(trajectories: list[Trajectory]) -> list[float]:
    return [t.env_reward for t in trajectories if t.metadata.get("well_formed") and t.env_reward is not None]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def bootstrap_interval(comparisons: list[ScenarioComparison], *, seed: int, resamples: int = 2000,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the win rate, scenarios as the sample: each resample draws the scenarios
    with replacement, and within each drawn scenario its checkpoint answers and its base answers with
    replacement, then pools the pairs as `win_rate_summary` does. The same seed gives the same interval."""
    if not comparisons:
        return 0.0, 1.0
    rng = random.Random(seed)
    rates = []
    for _ in range(resamples):
        wins = pairs = 0.0
        for c in rng.choices(comparisons, k=len(comparisons)):
            mine = rng.choices(c.checkpoint_rewards, k=len(c.checkpoint_rewards))
            theirs = rng.choices(c.base_rewards, k=len(c.base_rewards))
            wins += pair_wins(mine, theirs)
            pairs += len(mine) * len(theirs)
        rates.append(wins / pairs)
    rates.sort()
    tail = (1.0 - level) / 2
    return rates[int(tail * resamples)], rates[min(resamples - 1, int((1.0 - tail) * resamples))]


def win_rate_summary(comparisons: list[ScenarioComparison], *, seed: int = 0) -> dict[str, Any]:
    """The evaluation's metrics: win rate (ties half), its 95 % bootstrap interval over scenarios, what it rests
    on (scenarios, answers per side per scenario, pairs) and the env rewards per side."""
    n = sum(c.comparisons for c in comparisons)
    wins = sum(c.wins for c in comparisons)
    low, high = bootstrap_interval(comparisons, seed=seed)
    samples = max((len(c.checkpoint_rewards) for c in comparisons), default=0)
    return {
        "eval_win_rate": wins / n if n else None, "eval_ci_low": low if n else None,
        "eval_ci_high": high if n else None,
        "eval_scenarios": len(comparisons), "eval_samples": samples, "eval_comparisons": n,
        "eval_reward_checkpoint": _mean([r for c in comparisons for r in c.checkpoint_rewards]),
        "eval_reward_base": _mean([r for c in comparisons for r in c.base_rewards]),
        "eval_env_checkpoint": _mean([r for c in comparisons for r in c.checkpoint_env]),
        "eval_env_base": _mean([r for c in comparisons for r in c.base_env]),
        # None where the environment does not say what a well-formed answer is
        "eval_well_formed_checkpoint": _mean([float(f) for c in comparisons for f in c.checkpoint_formed]),
        "eval_well_formed_base": _mean([float(f) for c in comparisons for f in c.base_formed]),
        "eval_env_well_formed_checkpoint": _mean([r for c in comparisons for r in c.checkpoint_env_formed]),
        "eval_env_well_formed_base": _mean([r for c in comparisons for r in c.base_env_formed]),
    }


def verdict(low: float | None, high: float | None) -> str | None:
    """"better" than the base only when the whole 95 % interval is above 0.5, "worse" when it is below,
    "undecided" when it holds 0.5; None when nothing was compared."""
    if low is None or high is None:
        return None
    return "better" if low > 0.5 else "worse" if high < 0.5 else "undecided"


class Evaluator:
    """Runs the held-out evaluation for one run. Both sides answer afresh at every evaluation: reusing one draw
    of base answers would shift every later win rate the same way. It costs rollouts, not judge calls (the
    judge scores one group per scenario either way)."""

    def __init__(self, *, config: EvaluationConfig, held_out: list[Scenario], env: Any, rollout_config: Any,
                 scorer: Scorer, total_steps: int, seed: int) -> None:
        self.config, self.held_out, self.env, self.scorer = config, held_out, env, scorer
        self.total_steps, self.seed = total_steps, seed
        self.rollout_config = rollout_config
        if config.temperature is not None:
            sampling = rollout_config.sampling.model_copy(update={"temperature": config.temperature})
            self.rollout_config = dataclasses.replace(rollout_config, sampling=sampling)

    def due(self, step: int) -> bool:
        return bool(self.held_out) and (step % self.config.every == 0 or step == self.total_steps)

    async def _answers(self, client: Any, model: str, scenario: Scenario) -> list[Trajectory]:
        results = await asyncio.gather(*(self.env.rollout(client, model, scenario, self.rollout_config)
                                         for _ in range(self.config.samples)), return_exceptions=True)
        # A game with several players is compared on its first role (the seat the policy is evaluated in).
        return [first_side(r) for r in results if not isinstance(r, BaseException)]

    async def _scenario(self, step: int, client: Any, model: str, base_model: str,
                        scenario: Scenario) -> ScenarioComparison | None:
        mine, theirs = await asyncio.gather(self._answers(client, model, scenario),
                                            self._answers(client, base_model, scenario))
        entries = [(CHECKPOINT, t) for t in mine] + [(BASE, t) for t in theirs]
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
        summary = win_rate_summary(done, seed=zlib.crc32(f"{self.seed}:{step}:bootstrap".encode()))
        return {"step": step, "model": model, "baseline": base_model, **summary,
                "eval_unscored": len(results) - len(done), "scenarios": [asdict(r) for r in done]}
