"""Beat's health check (docker/compose.yml): beat answers no Celery ping, so it counts as healthy when it has sent
a task lately, which celery_signals.py notes in Redis as it sends. Its shortest schedule is the reaper's
(STUDIO_STALE_AFTER_S / 2); missing three of those in a row is unhealthy.

    python -m webapp.operations.probe beat      # exit 0 healthy, 1 not (the reason on stderr)
"""
from __future__ import annotations

import os
import sys

MISSED_SENDS = 3


def beat_problem() -> str | None:
    from django.conf import settings

    from webapp.operations import heartbeats

    schedules = [float(entry["schedule"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()
                 if isinstance(entry.get("schedule"), (int, float))]
    allowed = MISSED_SENDS * min(schedules, default=60.0)
    try:
        age = heartbeats.beat_last_sent_age_s()
    except Exception as err:  # noqa: BLE001
        return f"cannot tell: Redis does not answer ({type(err).__name__})"
    if age is None:
        return "beat has sent no task yet"
    if age > allowed:
        return f"beat sent its last task {age:.0f} s ago (more than {allowed:.0f} s)"
    return None


def main(argv: list[str]) -> int:
    if argv != ["beat"]:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    problem = beat_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
