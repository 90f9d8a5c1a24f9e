"""Pipelined steps (`pipeline.enabled`): the next step's rollouts run while this step trains.

The loop asks for a step's rollouts with `Ahead.take`: they are either the ones started one step ago (and kept
running meanwhile) or started now. Just before a step trains, once its review is applied, the loop starts the
next step's rollouts with the adapter it serves now, which is why they are exactly one step stale and never
more: a step's rollouts start only after the previous step's review and end before the next step's do.

A pause keeps the rollouts under way (they are the next step's, and finish for it); a cancel, a failure or the
end of the run discards them. Their groups' events were sent as they were scored; the step that did not train
is redone by a resume, whose groups replace them on the pages (the same (step, group) keys).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from training.types import TrajectoryGroup


@dataclass
class StepRollouts:
    """One step's groups, each scored; `model` (the adapter of step `model_step`) sampled them."""

    step: int
    model: str
    model_step: int
    groups: list[TrajectoryGroup | None]
    scoring: list[tuple[float, float]]  # (start, end) of each group's scoring
    started: float  # the first rollout began
    finished: float = 0.0  # the last group was scored

    @property
    def staleness(self) -> int:
        """Optimizer steps between the policy that sampled and the one that trains on them (0: on-policy)."""
        return self.step - 1 - self.model_step


RollOut = Callable[[int, str, int], Awaitable[StepRollouts]]  # (step, model, model_step) -> the step's rollouts


class Ahead:
    """At most one step's rollouts in flight ahead of the loop."""

    def __init__(self, roll_out: RollOut) -> None:
        self._roll_out = roll_out
        self._task: asyncio.Task[StepRollouts] | None = None
        self._step = 0
        self.model: str | None = None  # the adapter the rollouts in flight sample with (it must stay loaded)

    def start(self, step: int, model: str, model_step: int) -> None:
        self._task = asyncio.ensure_future(self._roll_out(step, model, model_step))
        self._step, self.model = step, model

    async def take(self, step: int, model: str, model_step: int) -> StepRollouts:
        """This step's rollouts: the ones started ahead for it, else rolled out now."""
        task, self._task, self.model = self._task, None, None
        if task is not None and self._step == step:
            return await task
        if task is not None:  # started for another step (cannot happen in the loop): never trained on
            await _cancelled(task)
        return await self._roll_out(step, model, model_step)

    async def discard(self) -> None:
        """Cancels the rollouts in flight (a cancel, a failure, the end of the run); none is trained on."""
        task, self._task, self.model = self._task, None, None
        if task is not None:
            await _cancelled(task)


async def _cancelled(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.wait([task])  # a cancel of the loop itself still goes through
    if not task.cancelled():
        task.exception()  # its error, if any, belongs to a step that will not train: retrieved, not raised
