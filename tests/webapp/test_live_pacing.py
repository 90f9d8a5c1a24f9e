"""Watchers cost the run little (issue 23): a web process joins a run's channel group once however many of its
sockets watch it, and each socket sends what changes its page, folded per ~100 ms window, ending where a
replay ends."""
from __future__ import annotations

import asyncio

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from tests.webapp.live_socket import LiveSocket, run_socket
from tests.webapp.factories import run_factory
from tests.webapp.test_live_stream import _group, _ingest
from training.events import GroupRolledOut, StepFinished, TrainStep
from webapp.live import fanout
from webapp.live.fanout import fold
from webapp.live.ingest import run_override_publish
from webapp.live.publish import run_group
from webapp.models import RunEvent, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _relays_stopped():
    """Each test ends once the relays its sockets left have left the run's group: a relay still cleaning up
    when the test's event loop closes is cancelled inside channels_redis, which can then hang the loop."""
    yield
    relays = [t for t in asyncio.all_tasks() if t.get_name().endswith("-relay")]
    if relays:
        await asyncio.wait(relays, timeout=10)


def _connect(user, run, after: int = 0) -> LiveSocket:
    return run_socket(user, run.id, after)


def _in_one_commit(*actions) -> None:
    """Their events are published back to back at commit: a burst far inside one window."""
    with transaction.atomic():
        for action in actions:
            action()


def _stored(run, seq: int) -> dict:
    return RunEvent.objects.get(run=run, seq=seq).as_message()


async def _open_window(client, run) -> dict:
    """A first event goes out at once and opens the socket's window; returns it."""
    await sync_to_async(_ingest)(run, _group(1, 0, [0.2, 0.8]))
    return await client.receive_json_from(timeout=5)


async def test_a_burst_of_updates_of_one_group_reaches_a_client_as_one_message_with_the_latest_state(monkeypatch):
    monkeypatch.setattr(fanout, "WINDOW_S", 1.0)  # a window no busy test machine overruns
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    owner = await sync_to_async(lambda: run.project.owner)()
    client = _connect(owner, run)
    assert (await client.connect())[0]
    scored = await _open_window(client, run)
    group_id = scored["data"]["group_id"]
    await sync_to_async(_in_one_commit)(*[
        (lambda: run_override_publish(run_id=run.id, group_id=group_id, step=1)) for _ in range(6)])
    [message] = await client.receive_frame(timeout=5)
    assert await client.receive_nothing(timeout=1.5)
    last = await sync_to_async(_stored)(run, 7)
    assert message == last  # one frame of one event, the newest as stored (its run summary included)

    late = _connect(owner, run)  # what a reload replays ends in the same place
    assert (await late.connect())[0]
    replay = await late.receive_frame(timeout=5)
    assert [m["seq"] for m in replay] == [1, 7] and replay[-1] == message
    assert await late.receive_nothing(timeout=0.3)
    await client.disconnect()
    await late.disconnect()


async def test_events_the_page_only_reads_the_run_summary_of_are_folded_into_the_next_one(monkeypatch):
    monkeypatch.setattr(fanout, "WINDOW_S", 1.0)
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    owner = await sync_to_async(lambda: run.project.owner)()
    client = _connect(owner, run)
    assert (await client.connect())[0]
    await _open_window(client, run)
    events = [GroupRolledOut(step=2, group_index=i, scenario_id="s1", model="m", trajectories=2, errors=[])
              for i in range(3)] + [TrainStep(step=2, metrics={"loss": 0.1}), StepFinished(step=2, metrics={})]
    await sync_to_async(_in_one_commit)(*[(lambda e=e: _ingest(run, e)) for e in events])
    message = await client.receive_json_from(timeout=5)
    assert (message["seq"], message["kind"]) == (6, "step_finished")
    assert message["data"]["run"] == (await sync_to_async(_stored)(run, 6))["data"]["run"]
    assert await client.receive_nothing(timeout=1.5)
    await client.disconnect()


async def test_one_window_reaches_every_socket_as_one_frame_and_a_socket_that_joined_late_ends_in_the_same_place(
        monkeypatch):
    monkeypatch.setattr(fanout, "WINDOW_S", 1.0)
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    owner = await sync_to_async(lambda: run.project.owner)()
    watching = [_connect(owner, run) for _ in range(3)]
    for client in watching:
        assert (await client.connect())[0]
    scored = await _open_window(watching[0], run)  # the window opens: the first event went out at once
    for client in watching[1:]:
        assert await client.receive_json_from(timeout=5) == scored
    late = _connect(owner, run, after=0)  # a page opened inside the window: replays, then joins the frames
    assert (await late.connect())[0]
    assert [m["seq"] for m in await late.receive_frame(timeout=5)] == [1]
    groups = [_group(1, i, [0.1 * i, 0.5]) for i in (1, 2)]
    await sync_to_async(_in_one_commit)(*[(lambda g=g: _ingest(run, g)) for g in groups],
                                        lambda: _ingest(run, StepFinished(step=1, metrics={"reward_mean": 0.4})))

    frames = [await client.receive_frame(timeout=5) for client in watching + [late]]
    assert all(frame == frames[0] for frame in frames)  # one window, one frame, the same for every page
    assert [(m["seq"], m["kind"]) for m in frames[0]] == [(2, "group_scored"), (3, "group_scored"),
                                                           (4, "step_finished")]
    assert frames[0][-1] == await sync_to_async(_stored)(run, 4)
    for client in watching + [late]:
        assert await client.receive_nothing(timeout=0.3)
        await client.disconnect()


async def test_a_web_process_joins_a_runs_group_once_however_many_of_its_sockets_watch():
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    owner = await sync_to_async(lambda: run.project.owner)()
    clients = [_connect(owner, run) for _ in range(5)]
    for client in clients:
        assert (await client.connect())[0]
    layer = get_channel_layer()
    members = redis.Redis.from_url(settings.REDIS_URL).zcard(layer._group_key(run_group(run.id)))  # noqa: SLF001
    assert members == 1
    await sync_to_async(_ingest)(run, StepFinished(step=1, metrics={"reward_mean": 0.5}))
    for client in clients:  # and every socket still gets the event
        assert (await client.receive_json_from(timeout=5))["kind"] == "step_finished"
    for client in clients:
        await client.disconnect()


def _m(seq: int, kind: str, **data) -> dict:
    return {"seq": seq, "kind": kind, "data": data}


def test_a_window_keeps_what_the_page_acts_on_and_always_its_last_message():
    window = [_m(1, "group_rolled_out", step=1, group_index=0), _m(2, "group_scored", step=1, group_index=0, group_id=9),
              _m(3, "judge_usage", step=1, group_index=0), _m(4, "override", group_id=9),
              _m(5, "group_scored", step=1, group_index=1, group_id=10), _m(6, "override", group_id=8),
              _m(7, "override", group_id=8), _m(8, "train_step", step=1)]
    # 1, 3: summary only; 4: the page fetches card 9 after this window anyway; 6: 7 supersedes it;
    # 8: summary only, but the last: it carries the newest run summary and seq.
    assert [m["seq"] for m in fold(window)] == [2, 5, 7, 8]


def test_a_resumed_step_rescoring_a_slot_in_the_same_window_sends_only_the_new_group():
    window = [_m(1, "group_scored", step=3, group_index=0, group_id=20),
              _m(2, "group_scored", step=3, group_index=0, group_id=21), _m(3, "step_finished", step=3)]
    assert [m["seq"] for m in fold(window)] == [2, 3]
