"""Runs executed for real: the in-process executor (embedded default) and Celery workers on Redis."""
from __future__ import annotations

import os
import signal
import time

import pytest
from asgiref.sync import sync_to_async

from tests.webapp.conftest import SCRIPTED_ENGINE, run_story, wait_for
from tests.webapp.live_socket import LiveSocket, run_socket
from tests.webapp.factories import agent_factory, project_factory, scenario_set_factory
from webapp.execution.executors import wait_idle
from webapp.live.fanout import SUMMARY_ONLY
from webapp.execution.runner import run_execute
from webapp.models import Run, RunStatus
from webapp.services import runs as run_services

pytestmark = pytest.mark.django_db(transaction=True)


def _launch(*, steps: int = 2, phase_s: float = 0.0, project=None, **overrides) -> Run:
    project = project or project_factory()
    # exact_match: the agent scores itself, so the run needs no judge
    options = {"exact_match": True, **({"phase_s": phase_s} if phase_s else {})}
    agent = agent_factory(project=project, environment_options=options)
    return run_services.run_launch(
        user=project.owner, project=project, name="exec test", agent=agent,
        scenario_set=scenario_set_factory(project=project), steps=steps, group_size=2, groups_per_step=2,
        learning_rate=1e-3, overrides=overrides or None)


def _events_once_quiet(run: Run, *, quiet_s: float, timeout: float = 60) -> int:
    """The run's event count once no event has arrived for `quiet_s` seconds."""
    count, since = run.events.count(), time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if (now := run.events.count()) != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return count
    raise AssertionError(f"run {run.pk}'s events never stopped arriving within {timeout} s: {run_story(run)}")


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


_socket = run_socket


async def _kinds_until(client: LiveSocket, last_kind: str, timeout: float = 60) -> list[dict]:
    messages = []
    while True:
        message = await client.receive_json_from(timeout=timeout)
        messages.append(message)
        if message["kind"] in (last_kind, "run_failed"):
            return messages


async def test_the_in_process_executor_runs_a_launched_run_and_streams_it(inprocess_executor, scripted_engine):
    project = await sync_to_async(project_factory)()
    # The page is open before the run starts: it sees every event live, in order.
    run = await sync_to_async(_launch)(project=project)
    client = _socket(await sync_to_async(lambda: project.owner)(), run.id)
    assert (await client.connect())[0]
    messages = await _kinds_until(client, "run_finished")
    kinds = [m["kind"] for m in messages]
    assert kinds.count("group_scored") == 4 and kinds.count("step_finished") == 2
    assert [m["seq"] for m in messages] == sorted(m["seq"] for m in messages)
    assert messages[-1]["data"]["run"]["status"] == RunStatus.COMPLETED
    await client.disconnect()
    await sync_to_async(wait_idle)(timeout=30)
    assert await sync_to_async(_status)(run) == RunStatus.COMPLETED


def test_pausing_holds_the_engine_and_resuming_lets_it_finish(inprocess_executor, scripted_engine):
    run = _launch(steps=3, phase_s=0.2)
    wait_for(lambda: _status(run) == RunStatus.RUNNING, message="the run to start")
    run_services.run_pause(user=run.project.owner, run=run)
    seen = run.events.count()
    # The engine holds at its next phase boundary: at most one phase's events follow, then none. Waited for, not
    # slept: on a loaded machine the events in flight took more than a fixed second to arrive (CI, 2 cores).
    held = _events_once_quiet(run, quiet_s=1.5)
    assert _status(run) == RunStatus.PAUSED
    assert held - seen <= 3
    run_services.run_resume(user=run.project.owner, run=run)
    wait_idle(timeout=60)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.steps_done == 3


def test_cancelling_a_running_run_stops_it_as_cancelled(inprocess_executor, scripted_engine):
    run = _launch(steps=50, phase_s=0.1)
    wait_for(lambda: run.events.filter(kind="group_scored").exists(), message="a first group")
    run_services.run_cancel(user=run.project.owner, run=run)
    wait_idle(timeout=60)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.steps_done < 50


def test_a_second_delivery_of_the_same_run_is_a_no_op(scripted_engine):
    run = _launch()  # on_commit enqueues to Redis, where no worker listens in this test
    assert run_execute(run_id=run.id, worker="first") == RunStatus.COMPLETED
    events = run.events.count()
    assert run_execute(run_id=run.id, worker="second") == "skipped"
    assert run.events.count() == events


def test_an_engine_that_cannot_start_fails_the_run_with_the_reason(settings):
    settings.STUDIO_ENGINE = "tests.webapp.no_such_engine:train"
    run = _launch()
    assert run_execute(run_id=run.id, worker="w") == RunStatus.FAILED
    run.refresh_from_db()
    assert "No module named 'tests.webapp.no_such_engine'" in run.error
    assert run.events.filter(kind="run_failed").exists()


async def test_a_celery_worker_runs_the_real_engine_and_a_late_client_gets_the_replay(start_celery_worker, tiny_run):
    await sync_to_async(start_celery_worker)()
    run = await sync_to_async(tiny_run)(steps=2)
    owner = await sync_to_async(lambda: run.project.owner)()
    early = _socket(owner, run.id)
    assert (await early.connect())[0]
    live = await _kinds_until(early, "run_finished", timeout=240)
    kinds = [m["kind"] for m in live]
    assert kinds[0] == "status" and "run_started" in kinds
    assert kinds.count("group_scored") == 4 and kinds.count("step_finished") == 2
    scored = next(m for m in live if m["kind"] == "group_scored")["data"]
    assert len(scored["trajectories"]) == 4 and all(t["env_reward"] is not None for t in scored["trajectories"])
    assert live[-1]["data"]["status"] == "completed"
    await early.disconnect()

    late = _socket(owner, run.id)  # joins after the run ended: the whole run is replayed from RunEvent
    assert (await late.connect())[0]
    replay = await _kinds_until(late, "run_finished")
    # Both are folded (consumers.fold): every event the page acts on, in order, ending at the run's last.
    shown = [m["seq"] for m in live if m["kind"] not in SUMMARY_ONLY]
    assert [m["seq"] for m in replay if m["kind"] not in SUMMARY_ONLY] == shown
    assert replay[-1]["seq"] == live[-1]["seq"]
    assert await late.receive_nothing(timeout=0.3)
    await late.disconnect()
    worker = await sync_to_async(lambda: Run.objects.get(pk=run.pk).worker)()
    assert worker.startswith("celery@")


def test_a_worker_whose_run_was_marked_crashed_stops_its_engine_and_a_resume_finishes_it(inprocess_executor,
                                                                                          scripted_engine):
    # Heartbeats can lapse while the worker lives on (a long database stall): once the reaper has marked the
    # run crashed, its engine must stop writing, or a resume would have two engines training one run.
    run = _launch(steps=3, phase_s=0.3)
    wait_for(lambda: run.events.filter(kind="group_scored").exists(), message="the first scored group")
    assert run_services.run_mark_crashed(run_id=run.id, reason="no heartbeat (simulated)")
    wait_idle(timeout=10)  # the worker let go of the run at once instead of finishing it
    events = run.events.count()
    time.sleep(1.0)
    assert run.events.count() == events and _status(run) == RunStatus.CRASHED
    assert not run.checkpoints.filter(step_index=3).exists()

    run_services.run_resume(user=run.project.owner, run=run)
    wait_for(lambda: _status(run) == RunStatus.COMPLETED, timeout=60, message="the resumed run to complete")
    assert run.checkpoints.filter(step_index=3).exists() and Run.objects.get(pk=run.pk).attempts == 2
    assert run.events.filter(kind="run_started").count() == 2  # the old engine never came back


def test_a_killed_worker_leaves_the_run_crashed_and_resume_continues_from_its_checkpoint(start_celery_worker):
    worker = start_celery_worker(SCRIPTED_ENGINE)
    run = _launch(steps=4, phase_s=0.4)
    wait_for(lambda: run.checkpoints.exists(), timeout=60, message="a first checkpoint", explain=lambda: run_story(run))
    os.killpg(worker.pid, signal.SIGKILL)  # the machine dies: worker, pool and engine, without a goodbye
    wait_for(lambda: run_services.runs_reap_stale() or _status(run) == RunStatus.CRASHED, timeout=30,
             interval=0.5, message="the reaper to mark the run crashed")
    run.refresh_from_db()
    assert run.status == RunStatus.CRASHED and "heartbeats" in run.error
    done = run.checkpoints.count()

    start_celery_worker(SCRIPTED_ENGINE)
    run_services.run_resume(user=run.project.owner, run=run)
    wait_for(lambda: _status(run) == RunStatus.COMPLETED, timeout=90, message="the resumed run to complete")
    resumed = run.events.filter(kind="run_started").order_by("-seq").first().payload
    assert resumed["resumed"] is True and resumed["start_step"] == done + 1
    assert run.checkpoints.count() == 4
    assert Run.objects.get(pk=run.pk).attempts == 2


def test_every_task_and_the_reaper_go_to_a_queue_that_a_documented_worker_consumes():
    import re

    from django.conf import settings

    from tests.webapp.conftest import ROOT
    from webapp.celery_app import app

    compose = (ROOT / "docker" / "compose.yml").read_text()
    consumed = {q for m in re.finditer(r"celery -A webapp\.celery_app worker .*?-Q (\S+)", compose)
                for q in m.group(1).split(",")}
    app.loader.import_default_modules()
    tasks = sorted(name for name in app.tasks if name.startswith("webapp."))
    assert {e["task"] for e in settings.CELERY_BEAT_SCHEDULE.values()} <= set(tasks)
    for name in tasks:
        queue = app.amqp.router.route({}, name)["queue"].name
        assert queue in consumed, f"{name} goes to queue {queue!r}; the workers in compose.yml consume {consumed}"
