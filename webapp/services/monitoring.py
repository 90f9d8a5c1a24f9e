"""Acting on a run's monitor alerts (recorded by webapp/live/ingest.py from the engine's events).

An alert whose monitor the run lists in `monitors.pause_on` pauses the run with the alert's reason, as a spent
judge budget does (webapp/services/runs.py); a person looks at the answers, then resumes.
"""
from __future__ import annotations

from webapp.models import RunEvent, RunStatus
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
