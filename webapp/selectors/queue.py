"""Why a queued run waits (issue 47): what holds the workers and how many runs are ahead of it, as the run list
and the run page say it ("waiting for a worker: run #12 is training; 1 queued ahead of it"), in the fair queue's
order (webapp/queue_policy.py), with its project's cap, its resume and its priority where they count.

Runs of other projects are counted, never named: a member sees only that another project's run holds a worker.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Q

from webapp.models import Run, RunStatus
from webapp.models.runs import ACTIVE_STATUSES, PARKED
from webapp.queue_policy import CAP_SETTING, Queued, claim_order, priority_bounded, project_capped, queue_read

_DOING = {RunStatus.RUNNING: "is training", RunStatus.PAUSED: "is paused (its engine holds the worker)",
          RunStatus.AWAITING_REVIEW: "waits for review (its engine holds the worker)"}


Queue = tuple[list[tuple[int, int, str]], list[Queued], Counter]


def _queue() -> Queue:
    """(id, project id, status) of every run whose engine holds a worker now, the queued runs in the order the
    fair queue takes them (webapp/queue_policy.py), and the runs in flight per project: a few queries, whatever
    the number of runs listed."""
    rows = Run.objects.filter(Q(status__in=ACTIVE_STATUSES) & ~Q(worker=PARKED))
    holding = list(rows.order_by("id").values_list("id", "project_id", "status"))
    queued, in_flight = queue_read()
    return holding, queued, in_flight


def queue_reason(*, run: Run, queue: Queue | None = None) -> str:
    """What the queued `run` waits for, in one line; its own phase when it is not queued."""
    if run.status != RunStatus.QUEUED:
        return run.phase
    holding, queued, in_flight = _queue() if queue is None else queue
    parts = [f"run #{rid} {_DOING[status]}" if project_id == run.project_id else
             f"a run of another project {_DOING[status]}" for rid, project_id, status in holding]
    me = next((q for q in queued if q.id == run.pk), None)
    if me is not None and project_capped(me.project_id, in_flight):
        parts.append(f"this project has {in_flight[me.project_id]} runs in flight, its cap "
                     f"({CAP_SETTING}={settings.STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT})")
    else:  # a free worker takes the first of the fair queue's order
        order = claim_order(queued, in_flight)
        if ahead := order.index(run.pk) if run.pk in order else 0:
            parts.append(f"{ahead} queued ahead of it")
    if me is not None and me.resuming:
        parts.append("it resumes ahead of runs not started yet")
    if me is not None and me.priority:
        parts.append(f"its project has queue priority {me.priority}")
    base = run.phase or "waiting for a worker"
    return f"{base}: {'; '.join(parts)}" if parts else base


def queue_settings(*, project) -> dict[str, int]:
    """The project page's queue card: its priority (as the queue counts it), the site's bounds and cap."""
    return {"priority": priority_bounded(project.queue_priority), "stored": project.queue_priority,
            "min": settings.STUDIO_QUEUE_PRIORITY_MIN, "max": settings.STUDIO_QUEUE_PRIORITY_MAX,
            "cap": settings.STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT}


def runs_explain_queue(*, runs: Iterable[Run]) -> list[Run]:
    """`runs`, each queued one's `phase` replaced (in memory, for the page) by queue_reason's line."""
    runs = list(runs)
    queue = _queue() if any(r.status == RunStatus.QUEUED for r in runs) else ([], [], Counter())
    for r in runs:
        if r.status == RunStatus.QUEUED:
            r.phase = queue_reason(run=r, queue=queue)
    return runs
