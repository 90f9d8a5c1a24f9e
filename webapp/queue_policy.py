"""The fair queue (issue 47; docs/webapp.md "The queue"): which queued run a free worker takes next, one rule that
the workers (services/runs.py run_claim_next) and the pages (selectors/queue.py) both read, so a run's page says
the order it is taken in.

1. A run that is resuming (it started before: parked and resumed, approved after its review, queued again for
   its judge, resumed after a crash or a failure) goes ahead of every run that has not started yet: no GPU
   work already done waits behind later launches.
2. Then the project's queue priority, higher first: its owner's choice within the deployment's
   STUDIO_QUEUE_PRIORITY_MIN..STUDIO_QUEUE_PRIORITY_MAX (a stored value outside bounds narrowed since counts as
   the nearest bound).
3. Then launch order.
A project whose runs hold STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT workers (0: no cap) waits, whatever its place:
the next run in order whose project is under its cap is taken instead.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q

PRIORITY_SETTINGS = "STUDIO_QUEUE_PRIORITY_MIN..STUDIO_QUEUE_PRIORITY_MAX"
CAP_SETTING = "STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT"


@dataclass(frozen=True)
class Queued:
    id: int
    project_id: int
    priority: int
    resuming: bool


def priority_bounded(value: int) -> int:
    return min(max(int(value), settings.STUDIO_QUEUE_PRIORITY_MIN), settings.STUDIO_QUEUE_PRIORITY_MAX)


def priority_check(value: int) -> int:
    """`value` when the deployment allows it; a ValidationError naming the bounds otherwise."""
    low, high = settings.STUDIO_QUEUE_PRIORITY_MIN, settings.STUDIO_QUEUE_PRIORITY_MAX
    if not low <= value <= high:
        raise ValidationError({"queue_priority": [f"choose a priority from {low} to {high} (this site's "
                                                  f"{PRIORITY_SETTINGS})"]})
    return value


def queue_key(run: Queued) -> tuple[int, int, int]:
    return (0 if run.resuming else 1, -run.priority, run.id)


def queue_read() -> tuple[list[Queued], Counter]:
    """(the queued runs in the order workers take them, before caps; {project id: runs holding a worker})."""
    from webapp.models import Run, RunStatus
    from webapp.models.runs import ACTIVE_STATUSES, PARKED

    queued = [Queued(id=rid, project_id=pid, priority=priority_bounded(priority), resuming=started is not None)
              for rid, pid, priority, started in Run.objects.filter(status=RunStatus.QUEUED).values_list(
                  "id", "project_id", "project__queue_priority", "started_at")]
    holding = Counter(Run.objects.filter(Q(status__in=ACTIVE_STATUSES) & ~Q(worker=PARKED))
                      .values_list("project_id", flat=True))
    return sorted(queued, key=queue_key), holding


def project_capped(project_id: int, holding: Counter) -> bool:
    cap = settings.STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT
    return bool(cap) and holding[project_id] >= cap


def claim_order(queued: list[Queued], holding: Counter) -> list[int]:
    """The ids a free worker may take now, first choice first (runs of capped projects left out)."""
    return [q.id for q in queued if not project_capped(q.project_id, holding)]
