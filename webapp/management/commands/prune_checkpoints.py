"""`python manage.py prune_checkpoints`: deletes, for every ended run, the checkpoints its retention policy does not
keep (services/checkpoint_retention.py; the run page says what was kept and why). Workers do it as each run ends,
and Celery beat runs it every hour (webapp.tasks.checkpoints_prune_task); without Celery (the embedded setup) run
this from cron to catch runs cancelled while queued or parked."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from webapp.services.checkpoint_retention import runs_checkpoints_prune


class Command(BaseCommand):
    help = "Delete the checkpoints of ended runs that their retention policy does not keep."

    def handle(self, *args, **options) -> None:
        done = runs_checkpoints_prune()
        for run_id, steps in done.items():
            self.stdout.write(f"run {run_id}: deleted the checkpoints of steps {', '.join(map(str, steps))}")
        self.stdout.write(f"{sum(len(s) for s in done.values())} checkpoint(s) of {len(done)} run(s) deleted")
