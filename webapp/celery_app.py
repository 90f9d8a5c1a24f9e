"""The Celery application. Start a GPU worker (one run at a time per GPU) with:

    celery -A webapp.celery_app worker -Q gpu --concurrency 1 --prefetch-multiplier 1 -n gpu@%h

a worker for playground re-scores and the reaper (it marks runs of dead workers `crashed`):

    celery -A webapp.celery_app worker -Q judge --concurrency 4 -n judge@%h

and beat, which schedules the reaper:  celery -A webapp.celery_app beat
"""
from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks, and what the processes tell /readyz and /metrics (presence, task outcomes, beat's sends).
app.conf.include = ["webapp.tasks", "webapp.operations.celery_signals"]
