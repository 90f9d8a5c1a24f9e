"""A judge outage waits instead of failing (issue 49): the engine's `judge_unavailable` event (its judge's
provider answered 429 or 5xx, or could not be reached, beyond the judge's retries) says which step waits. The
run records since when the judge has been down and when to ask it again; the runner then parks the run
(services.runs.run_park), and it is queued again at that time (services.runs.runs_judge_retry_due).

The wait grows with the outage: as long as the judge has been down so far, between STUDIO_JUDGE_RETRY_S and
STUDIO_JUDGE_RETRY_MAX_S, so a short blip costs seconds and a long outage asks every few minutes.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from webapp.models import Run


def judge_retry_delay(*, since: datetime, now: datetime) -> float:
    """Seconds to wait before asking the judge again, for an outage that began at `since`."""
    down = (now - since).total_seconds()
    return min(settings.STUDIO_JUDGE_RETRY_MAX_S, max(settings.STUDIO_JUDGE_RETRY_S, down))


def judge_unavailable_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    now = timezone.now()
    since = run.judge_down_since or now
    retry_at = now + timedelta(seconds=judge_retry_delay(since=since, now=now))
    detail = str(e.get("detail") or "the judge's provider failed")[:120]
    phase = (f"waiting for the judge: {detail} since {timezone.localtime(since):%H:%M}; its worker is free, "
             f"asking again at {timezone.localtime(retry_at):%H:%M:%S}")
    run.phase, run.judge_down_since, run.judge_retry_at = phase[:200], since, retry_at
    Run.objects.filter(pk=run.pk).update(phase=run.phase, judge_down_since=since, judge_retry_at=retry_at)
    return {"step": int(e.get("step") or 0), "detail": detail, "groups": int(e.get("groups") or 1),
            "since": since.isoformat(), "retry_at": retry_at.isoformat()}
