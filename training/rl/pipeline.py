"""Pipelined steps (`pipeline.enabled`): the next step's rollouts run while this step trains.

By default (`enabled` unset) a run is pipelined when a judge scores it: judge calls wait on the network, and
that wait is what the overlap hides. With the environment's reward alone both stages are compute, and on one
CPU they compete for the same cores: the CPU demo measured 1.4-2.5x slower pipelined (docs/engine.md). A local
server on the trainer's CPU then gets half the cores and the trainer the other half (`split_cores`).

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
from typing import TYPE_CHECKING, Awaitable, Callable

from training.types import TrajectoryGroup

if TYPE_CHECKING:
    from training.config import RunConfig


def is_pipelined(config: RunConfig, *, judged: bool, external_agent: bool) -> bool:
    """`pipeline.enabled`, or unset: whether a judge scores the run. Never with a server that sleeps while the
    trainer steps (vLLM sleep mode: it cannot roll out meanwhile), nor for an external agent, whose process
    samples each step with the adapter that step announces."""
    wanted = judged if config.pipeline.enabled is None else config.pipeline.enabled
    return wanted and config.server.gpu_sharing != "sleep" and not external_agent


def split_cores(pipelined: bool, server_kind: str, device: str) -> tuple[int, int] | None:
    """(server threads, trainer threads) where a pipelined run's local server computes on the trainer's CPU:
    half the cores each. Both at torch's default, two OpenMP teams wait on each other's spinning threads: the
    CPU demo's pipelined run took 2.1-2.5x the sequential one's time, 1.03x split (docs/engine.md)."""
    if not pipelined or server_kind != "local" or device != "cpu":
        return None
    import torch

    cores = torch.get_num_threads()
    return max(1, cores // 2), max(1, cores - cores // 2)


def set_threads(count: int) -> int:
    """Sets torch's CPU threads for this process (threads started later take it up); returns the old count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    return before


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
