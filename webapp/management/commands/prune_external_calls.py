"""`python manage.py prune_external_calls`: deletes the calls recorded through runs' endpoints (external
rollouts) for runs that ended more than STUDIO_EXTERNAL_CALLS_KEEP_DAYS days ago (default 30). Celery beat runs
the same every day (webapp.tasks.external_calls_prune_task); without Celery (the embedded setup) run this from
cron. The runs' groups, trajectories and checkpoints stay."""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from webapp.services.external_calls import external_calls_prune


class Command(BaseCommand):
    help = ("Delete the recorded endpoint calls of runs that ended more than STUDIO_EXTERNAL_CALLS_KEEP_DAYS days "
            "ago.")

    def handle(self, *args, **options) -> None:
        deleted = external_calls_prune()
        self.stdout.write(f"deleted {deleted} recorded call(s) of runs that ended more than "
                          f"{settings.STUDIO_EXTERNAL_CALLS_KEEP_DAYS} days ago")
