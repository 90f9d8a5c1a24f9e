"""Issue 33, item 7, as the attacker does it: recorded calls grew without bound. Every call tagged with
X-Trajectory-Id was stored, even with no step open or for an id of no group, each row holding the whole request
(storage in the square of the turns), and nothing pruned them. Now: recorded only for an open step's groups
(409 otherwise, before the server is asked), stored as each call's new messages, pruned after the run ended,
and in the run's export. Also the answer's size cap and the upstream timeout a person sets."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from tests.security.endpoint_upstream import FakeUpstream, agent_client, attackers_run, chat, opening
from webapp.live.ingest import run_event_ingest
from webapp.models import ExternalCall, ExternalGroup, RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def upstream():
    with FakeUpstream() as server:
        yield server


def test_calls_are_recorded_only_for_an_open_steps_groups(upstream):
    run, key = attackers_run(upstream)
    client = agent_client(key)
    # An id whose messages open no group of the step: not the run's system prompt, or no scenario of it.
    for messages in ([{"role": "user", "content": "hello"}],
                     [opening()[0], {"role": "user", "content": "Tell me a joke."}]):
        refused = chat(client, run, {"messages": messages}, trajectory="stray")
        assert refused.status_code == 409 and "no group" in refused.json()["detail"], refused.content
    # A group submitted already takes no more calls, for its ids or its scenario.
    assert chat(client, run, {"messages": opening()}, trajectory="a").status_code == 200
    assert client.post(f"/api/runs/{run.id}/rollouts/groups/", {"step": 1, "group_index": 0,
                                                                 "trajectories": [{"id": "a"}]},
                       format="json").status_code == 201
    assert chat(client, run, {"messages": opening(1)}, trajectory="a").status_code == 409  # a used id
    assert chat(client, run, {"messages": opening(0)}, trajectory="b").status_code == 409  # a closed group
    assert chat(client, run, {"messages": opening(1)}, trajectory="b").status_code == 200
    # The step closes: nothing more is recorded, though the run still serves.
    run_event_ingest(run_id=run.id, event={"kind": "rollouts_closed", "step": 1, "received": [0], "missing": [1]})
    closed = chat(client, run, {"messages": opening(1)}, trajectory="c")
    assert closed.status_code == 409 and "no step is open" in closed.json()["detail"]
    assert len(upstream.chats()) == 2  # the refused calls never reached the server
    assert chat(client, run, {"messages": opening(1)}).status_code == 200  # untagged: served, not recorded
    assert sorted(ExternalCall.objects.values_list("trajectory_key", flat=True)) == ["a", "b"]


def test_a_long_conversation_is_stored_as_each_calls_new_messages_and_trains_on_the_exact_prefix(upstream):
    turns = 12
    upstream.reply = lambda body: f"answer {len(body['messages'])}"
    run, key = attackers_run(upstream)
    client = agent_client(key)
    conversation = opening()
    for turn in range(turns):
        answer = chat(client, run, {"messages": conversation}, trajectory="long").json()["choices"][0]["message"]
        conversation = [*conversation, answer, {"role": "user", "content": f"and then {turn}?"}]
    calls = list(ExternalCall.objects.filter(run=run).order_by("id"))
    assert len(calls) == turns
    # Each call keeps the messages it added: 2, then 2 a turn, not the whole prefix every time (2 + 4 + 6 + ...).
    assert [len(c.messages) for c in calls] == [2] + [2] * (turns - 1)
    assert [c.length for c in calls] == [2 + 2 * k for k in range(turns)]
    assert all(c.parent_id == p.pk for p, c in zip(calls, calls[1:]))
    # What the server was sent at the last call is rebuilt exactly (the trainer renders that prefix).
    from webapp.services.external_calls import external_call_conversations

    last = external_call_conversations(calls)[-1]["request"]["messages"]
    assert json.dumps(last) == json.dumps(upstream.chats()[-1]["messages"])
    final = [*conversation[:-1]]  # ends with the last answer
    response = client.post(f"/api/runs/{run.id}/rollouts/groups/", {
        "step": 1, "group_index": 0, "trajectories": [{"id": "long", "messages": final}]}, format="json")
    assert response.status_code == 201, response.content
    trained = ExternalGroup.objects.get(run=run).trajectories[0]
    assert len(trained["turn_token_ids"]) == turns and all(ids == [11, 12, 13] for ids in trained["turn_token_ids"])
    # The run's export lists every call as stored.
    browser = client.__class__()
    browser.force_login(run.project.owner)
    lines = b"".join(browser.get(f"/runs/{run.id}/calls.jsonl").streaming_content).decode().splitlines()
    exported = [json.loads(line) for line in lines]
    assert [e["id"] for e in exported] == [c.pk for c in calls]
    assert exported[1]["parent"] == calls[0].pk and exported[1]["messages"] == calls[1].messages


def test_recorded_calls_are_pruned_after_their_run_ended(upstream, settings):
    settings.STUDIO_EXTERNAL_CALLS_KEEP_DAYS = 30
    runs = []
    for ended_days_ago in (31, 29, None):
        run, key = attackers_run(upstream)
        assert chat(agent_client(key), run, {"messages": opening()}, trajectory="t").status_code == 200
        if ended_days_ago is not None:
            run.status, run.finished_at = RunStatus.COMPLETED, timezone.now() - timedelta(days=ended_days_ago)
            run.save(update_fields=["status", "finished_at"])
        runs.append(run)
    call_command("prune_external_calls", stdout=open("/dev/null", "w"))
    assert [ExternalCall.objects.filter(run=r).count() for r in runs] == [0, 1, 1]


def test_an_answer_over_the_size_cap_is_a_502_and_is_not_recorded(upstream, settings):
    settings.STUDIO_EXTERNAL_MAX_ANSWER_BYTES = 64 * 1024
    upstream.answer_padding = 200 * 1024
    run, key = attackers_run(upstream)
    response = chat(agent_client(key), run, {"messages": opening()}, trajectory="big")
    assert response.status_code == 502 and "STUDIO_EXTERNAL_MAX_ANSWER_BYTES" in response.json()["detail"]
    assert not ExternalCall.objects.exists()


def test_the_upstream_timeout_is_the_agents_within_the_deployments_maximum(upstream, settings):
    upstream.delay_s = 3.0
    run, key = attackers_run(upstream, options={"upstream_timeout_s": 0.5})
    started = time.monotonic()
    response = chat(agent_client(key), run, {"messages": opening()})
    assert response.status_code == 504 and "0.5 s" in response.json()["detail"], response.content
    assert time.monotonic() - started < 2.5
    settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S = 1.0  # the deployment's maximum caps what the agent asks for
    run, key = attackers_run(upstream, options={"upstream_timeout_s": 100})
    assert "within 1 s" in chat(agent_client(key), run, {"messages": opening()}).json()["detail"]
