"""Distillation with the rubric as the filter: a teacher answers each scenario n times, the run's scorer (the
judge, RULER-style over the group, or the environment's reward) ranks the answers, and the best answer at or
above a threshold becomes a draft example for SFT.

The teacher is any OpenAI-compatible client (an inference server serving a checkpoint, a scripted double, or
the web app's litellm-backed teacher, studio/teacher.py); its answers are rolled out by the scenario's
environment exactly as training rollouts are, so a draft is a conversation in the format
the student will be trained and evaluated in. Pure engine code: the web app stores and reviews the drafts.

`distil` reports each scenario as it finishes (`on_result`) and asks `should_stop` before starting another, so a
caller can count costs and stop at a budget.
"""
from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from egress.failures import failure_detail
from training.types import Scenario, Scorer, TrajectoryGroup, first_side


@dataclass
class DistilResult:
    """One scenario's outcome: the chosen answer (None when none reached the threshold or none was scored)."""

    scenario_id: str
    candidates: int  # the teacher's answers that came back
    rewards: list[float | None]  # every candidate's reward, in rollout order
    chosen: int | None = None  # the index of the best candidate at or above the threshold
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    reward: float | None = None
    judge_score: float | None = None
    explanation: str = ""
    error: str = ""  # why nothing could be chosen (rollouts failed, the scorer failed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose(group: TrajectoryGroup, threshold: float) -> tuple[int | None, str]:
    """(index of the highest-reward answer at or above `threshold`, or None with the reason). Ties go to the
    earlier answer: the order is the rollouts', so no answer is favoured for where the judge saw it."""
    scored = [(t.reward, i) for i, t in enumerate(group.trajectories) if t.reward is not None and t.error is None]
    if not scored:
        return None, "no answer was scored"
    best_reward, best = max(scored, key=lambda pair: (pair[0], -pair[1]))
    if best_reward < threshold:
        return None, f"the best answer scored {best_reward:.3f}, below the threshold {threshold:.3f}"
    return best, ""


async def distil_scenario(*, env: Any, client: Any, model: str, scenario: Scenario, rollout_config: Any, n: int,
                          scorer: Scorer, threshold: float) -> tuple[DistilResult, TrajectoryGroup]:
    """The teacher's n answers to one scenario, ranked by `scorer`, the best above the threshold chosen."""
    # Each answer on its own request (not rollout_group's one batched request): an answer that fails, say at
    # the teacher's budget, costs only itself, and the answers already paid for are kept.
    group = TrajectoryGroup(scenario=scenario, trajectories=[])
    answers = await asyncio.gather(*(env.rollout(client, model, scenario, rollout_config) for _ in range(n)),
                                   return_exceptions=True)
    for answer in answers:
        if isinstance(answer, BaseException):
            # the teacher's HTTP status, never its reply's body (egress.failure_detail)
            group.errors.append(f"{type(answer).__name__}: {failure_detail(answer)}")
        else:
            group.trajectories.append(first_side(answer))
    result = DistilResult(scenario_id=scenario.id, candidates=len(group.trajectories), rewards=[])
    if len(group.trajectories) < (2 if n > 1 else 1):
        result.error = "; ".join(group.errors) or "the teacher gave too few answers to rank"
        result.rewards = [None] * len(group.trajectories)
        return result, group
    try:
        scores = await scorer(group)
        for t, s in zip(group.trajectories, scores):
            t.reward, t.judge_score, t.explanation = s.reward, s.judge_score, s.explanation
    except Exception as err:  # noqa: BLE001 - recorded as this scenario's error; the others go on
        result.error = f"{type(err).__name__}: {failure_detail(err)}"
    result.rewards = [t.reward for t in group.trajectories]
    if result.error:
        return result, group
    chosen, why = choose(group, threshold)
    if chosen is None:
        said = next((t.explanation for t in group.trajectories if t.explanation), "")
        # e.g. a judge that was not asked because every answer was the same (nothing to rank)
        result.error = f"{why} ({said})" if said and all(r is None for r in result.rewards) else why
        return result, group
    best = group.trajectories[chosen]
    result.chosen, result.messages, result.tools = chosen, best.messages, best.tools
    result.reward, result.judge_score, result.explanation = best.reward, best.judge_score, best.explanation
    return result, group


async def distil(*, scenarios: list[Scenario], env: Any, client: Any, model: str, rollout_config: Any, n: int,
                 scorer: Scorer, threshold: float, concurrency: int = 4,
                 on_result: Callable[[DistilResult, TrajectoryGroup], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[DistilResult]:
    """Every scenario's result, in the scenarios' order (those skipped after a stop are left out)."""
    gate = asyncio.Semaphore(concurrency)
    results: list[DistilResult | None] = [None] * len(scenarios)

    async def one(i: int, scenario: Scenario) -> None:
        async with gate:
            if should_stop is not None and should_stop():
                return
            result, group = await distil_scenario(env=env, client=client, model=model, scenario=scenario,
                                                  rollout_config=rollout_config, n=n, scorer=scorer,
                                                  threshold=threshold)
            results[i] = result
            if on_result is not None:
                on_result(result, group)

    await asyncio.gather(*(one(i, s) for i, s in enumerate(scenarios)))
    return [r for r in results if r is not None]
