"""When a worker's engine stops so that its worker can take another run (issue 47: no GPU waits on a person):
a paused run, or one whose step waits for a reviewer, parks while another run waits in the queue. The engine
keeps a step parked at its review (training/parking), and the next engine of the run takes it up only when a
reviewer approved that very step, or when the run waited for its judge (live/judge_outage.py); any other
start rolls it out again (the redo rules of live/override_redo.py).
"""
from __future__ import annotations

from pathlib import Path

from training.rl.parking import scored_step_discard

from webapp.models import Run, RunStatus
from webapp.services.runs import runs_waiting


def park_wanted(*, run_id: int, state: str, awaiting_step: int | None) -> bool:
    """Whether the engine of `run_id` should stop now to free its worker: it is paused (`state`), or its step
    `awaiting_step` waits for a person, and another run waits for a worker."""
    if state != "pause" and awaiting_step is None:
        return False
    if state != "pause" and Run.objects.filter(pk=run_id).values_list("status", flat=True).first() \
            != RunStatus.AWAITING_REVIEW:
        return False
    return runs_waiting(besides=run_id)


def kept_step_settle(*, run: Run, out_dir: Path) -> None:
    """Before an engine starts: a step its last engine kept is taken up only if a reviewer approved it, or if
    the run waits for its judge (either way every group of it is recorded); otherwise, e.g. after a crash
    before anyone approved, the step is rolled out again as any resumed step is."""
    if run.review_approved_step <= run.steps_done and run.judge_down_since is None:
        scored_step_discard(out_dir)
