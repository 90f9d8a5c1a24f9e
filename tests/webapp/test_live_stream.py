"""Engine events → RunEvent rows + domain rows → websocket clients (live and late), through channels_redis."""
from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from training.events import (CheckpointSaved, GroupScored, JudgeUsage, ReviewRequested, RunFinished, RunStarted,
                             StepFinished)
from training.types import JudgeReport
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, RunEvent, RunStatus, Step, Trajectory, TrajectoryGroup
from tests.webapp.live_socket import LiveSocket, run_socket
from tests.webapp.factories import member_factory, run_factory, user_factory

pytestmark = pytest.mark.django_db(transaction=True)


def _group(step: int, index: int, rewards: list[float], explanation: str = "fine") -> GroupScored:
    trajectories = [{"scenario_id": "s1", "messages": [{"role": "assistant", "content": f"answer {i}"}],
                     "env_reward": r, "judge_score": r, "explanation": f"{explanation} {i}", "criteria": {"clarity": r},
                     "reward": r, "advantage": r - 0.5, "error": None, "completion_tokens": 3, "metadata": {}}
                    for i, r in enumerate(rewards)]
    return GroupScored(step=step, group_index=index, scenario_id="s1", trajectories=trajectories,
                       reward_mean=sum(rewards) / len(rewards), reward_std=0.2, skipped=False)


def _usage(step: int, *calls: dict) -> JudgeUsage:
    hits = sum(bool(c.get("cache_hit")) for c in calls)
    return JudgeUsage(step=step, group_index=0, report=JudgeReport(judge_model="openai/judge", calls=list(calls),
                                                                   requests=len(calls) - hits, cache_hits=hits))


def _ingest(run, event) -> RunEvent:
    return run_event_ingest(run_id=run.id, event=event.to_dict())


def _connect(user, run, after: int = 0) -> LiveSocket:
    return run_socket(user, run.id, after)


def test_ingesting_a_scored_group_stores_ranked_trajectories_and_a_compact_event():
    run = run_factory(status=RunStatus.RUNNING)
    event = _ingest(run, _group(1, 0, [0.2, 0.9, 0.5]))
    group = TrajectoryGroup.objects.get(run=run)
    ranked = list(group.trajectories.order_by("rank").values_list("reward", flat=True))
    assert ranked == [0.9, 0.5, 0.2]
    assert event.seq == 1 and event.kind == "group_scored"
    assert [t["reward"] for t in event.payload["trajectories"]] == [0.9, 0.5, 0.2]
    assert "messages" not in event.payload["trajectories"][0]  # full messages stay in Trajectory rows


def test_a_step_a_checkpoint_and_the_end_of_a_run_update_the_run_row():
    run = run_factory(status=RunStatus.RUNNING, steps=1)
    _ingest(run, RunStarted(run_name="r", start_step=1, total_steps=1, resumed=False))
    _ingest(run, _group(1, 0, [0.1, 0.3]))
    _ingest(run, CheckpointSaved(step=1, path="/tmp/x", adapter_name="r@1"))
    _ingest(run, StepFinished(step=1, metrics={"reward_mean": 0.2, "reward_std": 0.1, "loss": 0.7}))
    _ingest(run, RunFinished(status="completed", steps_done=1))
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.steps_done == 1 and run.finished_at is not None
    assert Step.objects.get(run=run, index=1).metrics["loss"] == 0.7
    assert Checkpoint.objects.get(run=run).adapter_name == "r@1"
    assert list(run.events.values_list("seq", flat=True)) == [1, 2, 3, 4, 5]


def test_a_gated_step_waits_for_review_when_its_scoring_ends():
    run = run_factory(status=RunStatus.RUNNING, review_gate=True)
    _ingest(run, _group(1, 0, [0.1, 0.3]))
    _ingest(run, ReviewRequested(step=1))
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_REVIEW and run.phase == "step 1: waiting for review"


def test_a_gated_step_waits_for_review_even_when_the_run_was_paused_during_scoring_and_the_pause_is_kept():
    from webapp.execution.runner import _review_released
    from webapp.services.runs import run_pause, run_resume

    run = run_factory(status=RunStatus.RUNNING, review_gate=True)
    run_pause(user=run.project.owner, run=run)
    _ingest(run, _group(1, 0, [0.1, 0.3]))
    _ingest(run, ReviewRequested(step=1))
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.phase == "paused before step 1's review: Resume opens it"
    assert not _review_released(run.id, 1)  # the engine gets no rewards: the step never trains unreviewed
    run_resume(user=run.project.owner, run=run)
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_REVIEW and run.phase == "step 1: waiting for review"


def test_a_resumed_step_replaces_its_half_recorded_groups():
    run = run_factory(status=RunStatus.RUNNING)
    _ingest(run, _group(2, 0, [0.1, 0.2]))
    _ingest(run, _group(2, 0, [0.7, 0.8, 0.9]))
    assert TrajectoryGroup.objects.filter(run=run).count() == 1
    assert Trajectory.objects.filter(group__run=run).count() == 3


def test_a_nan_metric_is_stored_as_missing_instead_of_breaking_the_stream():
    run = run_factory(status=RunStatus.RUNNING)
    event = _ingest(run, StepFinished(step=1, metrics={"reward_mean": float("nan"), "loss": 0.1}))
    assert event.payload["metrics"]["reward_mean"] is None


def test_run_events_are_append_only():
    run = run_factory(status=RunStatus.RUNNING)
    event = _ingest(run, _group(1, 0, [0.1, 0.2]))
    event.kind = "edited"
    with pytest.raises(RuntimeError, match="append-only"):
        event.save()


async def test_a_connected_client_receives_events_through_redis_as_they_are_ingested():
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    owner = await sync_to_async(lambda: run.project.owner)()
    client = _connect(owner, run)
    connected, _ = await client.connect()
    assert connected
    await sync_to_async(_ingest)(run, _group(1, 0, [0.4, 0.6]))
    await sync_to_async(_ingest)(run, StepFinished(step=1, metrics={"reward_mean": 0.5}))
    first = await client.receive_json_from(timeout=5)
    second = await client.receive_json_from(timeout=5)
    assert (first["seq"], first["kind"]) == (1, "group_scored")
    assert (second["seq"], second["kind"]) == (2, "step_finished")
    assert second["data"]["metrics"]["reward_mean"] == 0.5
    await client.disconnect()


async def test_a_late_client_replays_only_what_it_missed_then_streams():
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    owner = await sync_to_async(lambda: run.project.owner)()
    for step in (1, 2, 3):
        await sync_to_async(_ingest)(run, StepFinished(step=step, metrics={"reward_mean": step / 10}))
    client = _connect(owner, run, after=1)
    assert (await client.connect())[0]
    replayed = [await client.receive_json_from(timeout=5) for _ in range(2)]
    assert [m["seq"] for m in replayed] == [2, 3]
    await sync_to_async(_ingest)(run, StepFinished(step=4, metrics={}))
    assert (await client.receive_json_from(timeout=5))["seq"] == 4
    assert await client.receive_nothing(timeout=0.3)
    await client.disconnect()


async def _refused_with(socket) -> int | None:
    """The close code of a refused socket: the handshake is accepted, then closed at once with the reason."""
    connected, _ = await socket.connect()
    assert connected
    message = await socket.receive_output(timeout=5)
    return message.get("code") if message["type"] == "websocket.close" else None


async def test_a_non_member_is_refused_with_the_404_close_code_a_browser_can_read():
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    stranger = await sync_to_async(user_factory)()
    assert await _refused_with(_connect(stranger, run)) == 4404


async def test_a_server_stopping_ends_every_socket_even_one_mid_send():
    """A server that stops cancels every task at once (so does asyncio.Runner when an async test ends). Each
    socket's channel-layer read must end then. With a Redis socket timeout, redis-py sends each command through
    asyncio.wait_for, which on Python 3.11 can swallow that cancel: the read went on polling Redis forever (about
    one stop in 35 here; CI's test run hung 600 s on it)."""
    import asyncio

    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    stranger = await sync_to_async(user_factory)()
    for _ in range(100):
        assert await _refused_with(_connect(stranger, run)) == 4404  # its consumer reads the layer until cancelled
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=10)
        for task in pending:
            task.cancel()  # a second cancel frees it, so the failure below is not followed by a hung teardown
        assert not pending, pending


async def test_an_anonymous_client_is_refused_and_a_viewer_is_let_in():
    from django.contrib.auth.models import AnonymousUser

    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    assert await _refused_with(_connect(AnonymousUser(), run)) == 4401
    viewer = await sync_to_async(member_factory)(project=await sync_to_async(lambda: run.project)())
    client = _connect(viewer, run)
    assert (await client.connect())[0]
    await client.disconnect()


def test_a_database_blip_while_recording_a_scored_group_is_retried_not_dropped():
    import json
    import threading

    import psycopg
    from django.db import connection

    from webapp.execution.runner import _ingest_line

    run = run_factory(status=RunStatus.RUNNING)
    db = connection.settings_dict
    dsn = f"host={db['HOST']} port={db['PORT'] or 5432} user={db['USER']} dbname={db['NAME']}"
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("ALTER TABLE webapp_runevent RENAME TO webapp_runevent_away")  # the blip begins
        timer = threading.Timer(1.0, lambda: other.execute("ALTER TABLE webapp_runevent_away RENAME TO webapp_runevent"))
        timer.start()
        kind, step = _ingest_line(run.id, json.dumps(_group(3, 0, [0.2, 0.9]).to_dict()).encode())
        timer.join()
    assert (kind, step) == ("group_scored", 3)
    assert TrajectoryGroup.objects.get(run=run, step_index=3).trajectories.count() == 2
    assert list(run.events.values_list("kind", flat=True)) == ["group_scored"]


def test_a_run_pauses_once_its_judge_calls_have_cost_its_judges_budget():
    from decimal import Decimal

    from tests.webapp.factories import judge_factory, project_factory
    from webapp.services.runs import run_judge_budget_check

    project = project_factory()
    run = run_factory(project=project, status=RunStatus.RUNNING,
                      judge_config=judge_factory(project=project, budget_usd=Decimal("0.05")))

    def scored(step: int, cost: float | None) -> bool:
        _ingest(run, _group(step, 0, [0.2, 0.9]))
        _ingest(run, _usage(step, {"prompt_tokens": 90, "cost_usd": cost}))
        return run_judge_budget_check(run_id=run.id)

    assert scored(1, 0.03) is False and scored(2, None) is False  # an unpriced call costs nothing known
    assert scored(3, 0.03) is True
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and "the judge budget of $0.05 is spent ($0.06)" in run.phase


def test_cache_hits_are_recorded_apart_and_billed_nowhere():
    from decimal import Decimal

    from tests.webapp.factories import judge_factory, project_factory
    from webapp.selectors.runs import run_judge_cost
    from webapp.services.runs import run_judge_budget_check

    project = project_factory()
    run = run_factory(project=project, status=RunStatus.RUNNING,
                      judge_config=judge_factory(project=project, budget_usd=Decimal("0.05")))
    _ingest(run, _group(1, 0, [0.2, 0.9]))
    _ingest(run, _usage(1, {"prompt_tokens": 90, "cost_usd": 0.03}))
    # step 2 re-judges the same request from the cache: the record keeps the first call's price
    _ingest(run, _group(2, 0, [0.2, 0.9]))
    _ingest(run, _usage(2, {"prompt_tokens": 90, "cost_usd": 0.03, "cache_hit": True}))
    _ingest(run, StepFinished(step=2, metrics={}))

    assert run_judge_budget_check(run_id=run.id) is False  # $0.03 really spent, not $0.06
    cost = run_judge_cost(run=run)
    assert (cost["calls"], cost["cost_usd"], cost["unpriced"], cost["cache_hits"]) == (1, 0.03, 0, 1)
    assert Step.objects.get(run=run, index=2).judge_cost_usd == 0.0
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(project.owner)
    assert api.get(f"/api/runs/{run.id}/").json()["judge_cost"] == run_judge_cost(run=run)
    assert list(run.judge_calls.order_by("id").values_list("cached", flat=True)) == [False, True]
    first = Trajectory.objects.get(group__run=run, group__step_index=2, index=0)
    assert first.metadata["judge"] | {"passes": 1} == {"passes": 1, "disagreement": None, "identical": False,
                                                       "truncated": [], "requests": 0, "cache_hits": 1}
