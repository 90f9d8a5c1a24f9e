"""The engine child's event writer (issue 23): a parent that falls behind never holds a step up; while the
backlog lasts progress events are summarised, and the summary says so; every other event arrives, in order."""
from __future__ import annotations

import json
import os
import threading

import pytest

from training.events import GroupRolledOut, GroupScored, StepFinished
from webapp.execution.engine_child import EventWriter


def _events(steps: int, groups: int):
    big = [{"messages": [{"role": "assistant", "content": "x" * 2000}], "reward": 0.5}] * 4
    for step in range(1, steps + 1):
        for g in range(groups):
            yield GroupRolledOut(step=step, group_index=g, scenario_id="s", model="m", trajectories=4, errors=[])
            yield GroupScored(step=step, group_index=g, scenario_id="s", trajectories=big, reward_mean=0.5,
                              reward_std=0.1, skipped=False)
        yield StepFinished(step=step, metrics={"reward_mean": 0.5})


def test_a_parent_that_reads_nothing_does_not_hold_the_engine_up_and_nothing_but_progress_is_left_out():
    read_fd, write_fd = os.pipe()  # a pipe holds 64 KiB: these events are about 30 times that
    writer = EventWriter(write_fd)
    emitted = list(_events(steps=5, groups=16))
    done = threading.Event()

    def engine() -> None:
        for event in emitted:
            writer(event)
        done.set()

    threading.Thread(target=engine, daemon=True).start()
    assert done.wait(timeout=30), "the engine waited for a parent that was not reading"

    closing = threading.Thread(target=writer.close)
    closing.start()
    with os.fdopen(read_fd, "rb") as pipe:  # the parent catches up: the pipe closes when all is written
        received = [json.loads(line) for line in pipe]
    closing.join(timeout=30)

    kept = [e.to_dict() for e in emitted if e.kind != "group_rolled_out"]
    assert [e for e in received if e["kind"] not in ("group_rolled_out", "events_summarized")] == kept
    rolled_out = sum(e["kind"] == "group_rolled_out" for e in received)
    notes = [e for e in received if e["kind"] == "events_summarized"]
    assert rolled_out < 80 and notes  # the backlog dropped progress events ...
    assert rolled_out + sum(n["left_out"]["group_rolled_out"] for n in notes) == 80  # ... and counted each


def test_with_a_parent_that_keeps_up_every_event_arrives_as_emitted():
    read_fd, write_fd = os.pipe()
    writer = EventWriter(write_fd)
    emitted = list(_events(steps=1, groups=3))
    received = []
    reader = threading.Thread(target=lambda: received.extend(json.loads(line) for line in os.fdopen(read_fd, "rb")))
    reader.start()
    for event in emitted:
        writer(event)
    writer.close()
    reader.join(timeout=30)
    assert received == [e.to_dict() for e in emitted]


@pytest.mark.django_db
def test_the_run_page_says_how_many_progress_updates_the_engine_left_out(client):
    from tests.webapp.factories import run_factory
    from webapp.live.ingest import run_event_ingest

    run = run_factory()
    client.force_login(run.project.owner)
    assert "events-summarized" not in client.get(f"/runs/{run.id}/").content.decode()
    for left_out in (3, 4):
        run_event_ingest(run_id=run.id, event={"kind": "events_summarized", "max_pending": 64,
                                               "left_out": {"group_rolled_out": left_out}})
    header = client.get(f"/runs/{run.id}/header/").content.decode()
    assert 'id="events-summarized"' in header and "so 7 progress updates" in header
