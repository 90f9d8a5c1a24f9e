"""No run is stranded in `queued`: the reaper re-sends runs whose message was lost, and a run delivered twice
still runs once (claiming is idempotent)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.webapp.factories import run_factory
from webapp.execution.dispatch import RUN_EXECUTE, work_enqueue
from webapp.execution.executors import wait_idle
from webapp.models import Run, RunStatus
from webapp.services.runs import runs_reap_stale

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_reaper_re_sends_a_run_queued_past_the_limit_and_it_runs(inprocess_executor, scripted_engine, settings):
    settings.STUDIO_REQUEUE_AFTER_S = 300.0
    # Rows without a message: the broker lost them (Redis restarted, a worker acknowledged and died).
    stranded = run_factory(status=RunStatus.QUEUED)
    recent = run_factory(status=RunStatus.QUEUED)
    Run.objects.filter(pk=stranded.pk).update(created_at=timezone.now() - timedelta(seconds=301))
    runs_reap_stale()
    wait_idle(timeout=60)
    assert Run.objects.get(pk=stranded.pk).status == RunStatus.COMPLETED
    # Still within the limit, it was not re-sent; the slot the re-send woke took it next (launch order).
    recent = Run.objects.get(pk=recent.pk)
    assert recent.enqueued_at is None and recent.status == RunStatus.COMPLETED
    assert recent.started_at > Run.objects.get(pk=stranded.pk).started_at


def test_a_re_sent_run_is_not_re_sent_again_before_the_limit_passes(settings):
    settings.STUDIO_REQUEUE_AFTER_S = 300.0
    run = run_factory(status=RunStatus.QUEUED)  # STUDIO_EXECUTOR is celery here: re-sends go to Redis
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=301))
    runs_reap_stale()
    first = Run.objects.get(pk=run.pk).enqueued_at
    assert first is not None and timezone.now() - first < timedelta(seconds=60)
    runs_reap_stale()
    assert Run.objects.get(pk=run.pk).enqueued_at == first


def test_a_run_delivered_twice_runs_once(inprocess_executor, scripted_engine):
    run = run_factory(status=RunStatus.QUEUED)
    work_enqueue(name=RUN_EXECUTE, object_id=run.id)
    work_enqueue(name=RUN_EXECUTE, object_id=run.id)  # the reaper's re-send racing the original message
    wait_idle(timeout=60)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.attempts == 1
    assert run.events.filter(kind="run_started").count() == 1
