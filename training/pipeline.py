"""Pipelined steps (`pipeline.enabled`): the next step's rollouts run while this step trains.

The loop asks for a step's rollouts with `Ahead.take`: they are either the ones started one step ago (and kept
running meanwhile) or started now. The next step's rollouts start with the adapter served now: without a review
hook, as soon as this step's last group is rolled out (so they overlap this step's judging as well as its
training); with one, once the review is applied, just before the step trains (a step never rolls out ahead of
its predecessor's review). Either way they are exactly one step stale and never more: step k+1 starts while
step k is the newest step not trained, with step k-1's adapter, and trains on top of step k's.

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


# (step, model, model_step, rolled_out) -> the step's rollouts; sets `rolled_out` once every group is rolled out.
RollOut = Callable[[int, str, int, asyncio.Event], Awaitable[StepRollouts]]


class Ahead:
    """At most one step's rollouts in flight ahead of the loop."""

    def __init__(self, roll_out: RollOut) -> None:
        self._roll_out = roll_out
        self._task: asyncio.Task[StepRollouts] | None = None
        self._rolled_out = asyncio.Event()
        self._step = 0
        self.model: str | None = None  # the adapter the rollouts in flight sample with (it must stay loaded)

    def start(self, step: int, model: str, model_step: int) -> None:
        self._rolled_out = asyncio.Event()
        self._task = asyncio.ensure_future(self._roll_out(step, model, model_step, self._rolled_out))
        self._step, self.model = step, model

    async def take(self, step: int, model: str, model_step: int, *, start_next: bool = False) -> StepRollouts:
        """This step's rollouts, scored: the ones started ahead for it, else started now with `model`. With
        `start_next`, the next step's rollouts start with `model` once this step's groups are all rolled out."""
        if self._task is not None and self._step != step:  # started for another step (not in the loop)
            await self.discard()
        if self._task is None:
            self.start(step, model, model_step)
        task, rolled_out, self._task, self.model = self._task, self._rolled_out, None, None
        waiter = asyncio.ensure_future(rolled_out.wait())
        try:
            await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            if start_next and rolled_out.is_set():
                self.start(step + 1, model, model_step)
            return await task
        except BaseException:
            await _cancelled(task)  # a failed or cancelled step leaves no rollouts running
            raise
        finally:
            waiter.cancel()

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
