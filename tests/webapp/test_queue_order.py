"""The run queue is fair (issue 34, item 7): queued runs start in launch order whichever message woke the
worker, a free worker slot never waits for a message's re-send, and a parked run's Resume starts it as soon as
the slot is free. Real runs of the scripted engine, through the in-process executor and the Celery task's
code path (runs_execute_in_order)."""
from __future__ import annotations

import pytest

from tests.webapp.conftest import wait_for
from tests.webapp.factories import agent_factory, project_factory, run_factory
from webapp.execution import executors
from webapp.execution.runner import runs_execute_in_order
from webapp.models import Run, RunStatus
from webapp.services import runs as run_services

pytestmark = pytest.mark.django_db(transaction=True)


def _queued(project, name: str, steps: int = 1, **options) -> Run:
    agent = agent_factory(project=project, environment_options={"exact_match": True, **options})
    return run_factory(project=project, agent=agent, name=name, steps=steps, status=RunStatus.QUEUED)


def _started_order(runs: list[Run]) -> list[str]:
    rows = Run.objects.filter(pk__in=[r.pk for r in runs]).order_by("started_at")
    return [r.name for r in rows]


def test_a_worker_slot_runs_every_queued_run_first_launched_first(scripted_engine):
    project = project_factory()
    runs = [_queued(project, name) for name in ("first", "second", "third")]

    done = runs_execute_in_order(worker="test@slot")

    assert list(done) == [r.pk for r in runs]
    assert set(done.values()) == {RunStatus.COMPLETED}
    assert _started_order(runs) == ["first", "second", "third"]


def test_the_message_of_a_later_launch_starts_the_earliest_queued_run_and_then_the_rest(
        inprocess_executor, scripted_engine):
    project = project_factory()
    runs = [_queued(project, name) for name in ("first", "second", "third")]

    # Only the last launch's message reaches the worker (the others were lost, or are still on their way):
    # the slot still runs the first launch first and does not leave the others for the 600-s re-send.
    executors.submit(runs[-1].pk)
    executors.wait_idle(timeout=120)

    assert list(Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)) == \
        [RunStatus.COMPLETED] * 3
    assert _started_order(runs) == ["first", "second", "third"]


def test_a_resumed_parked_run_starts_as_soon_as_the_run_it_made_way_for_ends(inprocess_executor, scripted_engine):
    project = project_factory()
    paused = _queued(project, "paused", steps=4, phase_s=0.5)
    executors.submit(paused.pk)
    wait_for(lambda: Run.objects.get(pk=paused.pk).status == RunStatus.RUNNING, message="the first run to start")
    run_services.run_pause(user=project.owner, run=Run.objects.get(pk=paused.pk))
    waiting = _queued(project, "waiting", phase_s=0.5)  # no message sent: the parking alone must hand it over
    wait_for(lambda: Run.objects.get(pk=paused.pk).worker == run_services.PARKED, timeout=60,
             message="the paused run to be parked")
    wait_for(lambda: Run.objects.get(pk=waiting.pk).status != RunStatus.QUEUED, timeout=30,
             message="the waiting run to start once the paused one parked")

    run_services.run_resume(user=project.owner, run=Run.objects.get(pk=paused.pk))
    assert Run.objects.get(pk=paused.pk).status == RunStatus.QUEUED
    executors.wait_idle(timeout=120)

    waiting, paused = Run.objects.get(pk=waiting.pk), Run.objects.get(pk=paused.pk)
    assert (waiting.status, paused.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
    # The resumed run restarted after the waiting one finished, within moments, not after a re-send.
    gap = (paused.started_at - waiting.finished_at).total_seconds()
    assert 0 <= gap < 10, gap
