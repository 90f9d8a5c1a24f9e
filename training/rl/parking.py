"""A step's groups, kept between two engines of one run: `scored_step_keep` writes them when the loop stops at
the step's review (a park: the run waits for a person with its worker free) or because the judge's provider is
down (the run waits for the judge); `scored_step_take` hands them to the next engine if it starts at that very
step from the adapter they were sampled with, and `scored_step_rescore` scores the groups the judge was down
for; `scored_step_discard` drops them (after the step trained, or when the web app starts a run that must
redo it).

Why not redo the step as a crash's resume does: the groups a person reviewed are the ones that must train. New
rollouts would give other answers, and their overrides could only be carried where an answer repeats; and
judge calls already paid for would be paid again.
JSON, not pickle: the file sits beside the checkpoints and is read back by a later process.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from training.types import JudgeReport, Scenario, Trajectory, TrajectoryGroup

FILE = "scored-step.json"


def scored_step_keep(out: Path, *, step: int, model_step: int, groups: list[TrajectoryGroup | None]) -> None:
    """Writes the step's groups (in group-index order; None for a slot that never filled) atomically."""
    data = {"step": step, "model_step": model_step,
            "groups": [None if g is None else asdict(g) for g in groups]}
    staging = out / f".{FILE}.partial"
    staging.write_text(json.dumps(data))
    staging.replace(out / FILE)


def scored_step_take(out: Path, *, step: int, model_step: int) -> list[TrajectoryGroup | None] | None:
    """The kept groups of `step` sampled with the adapter of `model_step`, or None (nothing kept, or kept for
    another step or adapter: that step is rolled out again)."""
    path = out / FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("step") != step or data.get("model_step") != model_step:
        return None
    try:
        return [None if g is None else _group(g) for g in data["groups"]]
    except (KeyError, TypeError):  # written by another version of the engine: the step is rolled out again
        return None


async def scored_step_rescore(groups: list[TrajectoryGroup | None],
                              judge: Callable[[int, TrajectoryGroup], Awaitable[None]]) -> None:
    """Scores again, all at once, the kept groups the judge was down for (`judge(index, group)` scores one and
    reports it, as for a fresh group); the others keep their scores. One still down is marked again."""
    waiting = [(i, g) for i, g in enumerate(groups) if g is not None and g.judge_outage]
    for _, g in waiting:
        g.judge_outage = g.scoring_error = None
    await asyncio.gather(*(judge(i, g) for i, g in waiting))


def scored_step_discard(out: Path) -> None:
    (out / FILE).unlink(missing_ok=True)


def _group(data: dict[str, Any]) -> TrajectoryGroup:
    report = data.pop("judge_report", None)
    return TrajectoryGroup(scenario=Scenario(**data.pop("scenario")),
                           trajectories=[Trajectory(**t) for t in data.pop("trajectories")],
                           judge_report=None if report is None else JudgeReport(**report), **data)
