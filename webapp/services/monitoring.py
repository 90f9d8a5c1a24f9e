"""Acting on a run's monitor alerts (recorded by webapp/live/ingest.py from the engine's events).

An alert whose monitor the run lists in `monitors.pause_on` pauses the run with the alert's reason, as a spent
judge budget does (webapp/services/runs.py); a person looks at the answers, then resumes.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.execution.dispatch import CHECKPOINT_EVALUATE, work_enqueue
from webapp.models import Checkpoint, Role, Run, RunEvent, RunStatus
from webapp.services.access import require_role
from webapp.services.runs import _transition

PHASE_MAX = 200  # Run.phase


def run_monitor_pause_check(*, run_id: int) -> bool:
    """Called after a monitor alert was recorded: pauses the running run when that alert asks for it; True when
    it did."""
    event = RunEvent.objects.filter(run_id=run_id, kind="monitor_alert").order_by("-seq").first()
    if event is None or not event.payload.get("pause"):
        return False
    p = event.payload
    reason = f"paused by the {p['monitor']} monitor at step {p['step']}: {p['message']}"
    if len(reason) > PHASE_MAX:
        reason = reason[:PHASE_MAX - 1] + "…"
    return _transition(run_id, (RunStatus.RUNNING,), status=RunStatus.PAUSED, phase=reason)


def run_evaluate(*, user, run: Run, checkpoint: Checkpoint) -> None:
    """Evaluates a checkpoint against the base model on the run's held-out scenarios, now (not waiting for the
    run's next scheduled evaluation); the result arrives as an `evaluation` event on the run."""
    require_role(user=user, project=run.project, role=Role.EDITOR)
    if checkpoint.run_id != run.id:
        raise ValidationError({"checkpoint": ["that checkpoint is not this run's"]})
    if (run.config.get("environment") or {}).get("kind") == "external":
        raise ValidationError({"checkpoint": ["an agent in your own code is not evaluated here: its code, which "
                                              "would roll out the held-out scenarios, runs in your process"]})
    evaluation = run.config.get("evaluation") or {}
    if not (evaluation.get("held_out_ids") or evaluation.get("held_out_fraction")):
        raise ValidationError({"checkpoint": ["this run holds out no scenarios: mark some of its scenario set's "
                                              "scenarios as validation, or set evaluation in the overrides"]})
    transaction.on_commit(lambda: work_enqueue(name=CHECKPOINT_EVALUATE, object_id=checkpoint.id))
