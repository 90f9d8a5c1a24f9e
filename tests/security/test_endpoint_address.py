"""Issue 43 (part 4, item 7): the run's endpoint forwarded an external agent's calls to whatever address the
engine's `rollouts_wanted` event named. An event is only a line the engine process printed; the endpoint now
sends only to the address the worker recorded for the run, which is the run's own server on the worker's
engine host (loopback here) or the deployment's external server, never another host the line names. Written as
an ordinary account's run whose engine output names the cloud metadata address, another machine, or a loopback
URL with credentials: nothing is recorded, nothing is forwarded, and the endpoint says the run is not serving."""
from __future__ import annotations

import pytest

from tests.security.endpoint_upstream import FakeUpstream, agent_client, attackers_run, chat, opening
from webapp.live.ingest import run_event_ingest
from webapp.models import Run

pytestmark = pytest.mark.django_db


def _wanted(run, base_url: str, step: int = 2) -> None:
    run_event_ingest(run_id=run.id, event={
        "kind": "rollouts_wanted", "step": step, "model": "base", "base_url": base_url, "timeout_s": 600,
        "on_missing": "skip", "allow_unsampled": False, "group_size": 2, "system_prompt": "x",
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16},
        "groups": [{"group_index": 0, "scenario": {"id": "s1", "user_message": "hi", "context": None,
                                                   "metadata": {}}}]})


def test_the_runs_own_loopback_server_is_recorded_and_answers():
    with FakeUpstream() as upstream:
        run, key = attackers_run(upstream)
        assert Run.objects.get(pk=run.pk).external_base_url == upstream.base_url
        response = chat(agent_client(key), run, {"messages": opening()})
        assert response.status_code == 200, response.content
        assert upstream.chats()


@pytest.mark.parametrize("named", [
    "http://169.254.169.254/v1", "http://collector.example:8000/v1", "http://10.1.2.3:8000/v1",
    "http://user:secret@127.0.0.1:{port}/v1", "file:///etc/passwd", "http://127.0.0.1:{port}/v1?x=1",
])
def test_an_address_the_engine_names_elsewhere_is_never_recorded_nor_sent_to(named):
    with FakeUpstream() as upstream:
        run, key = attackers_run(upstream)
        _wanted(run, named.format(port=upstream.server.server_port))
        run.refresh_from_db()
        assert run.external_base_url == "" and "its endpoint is off" in run.phase
        before = len(upstream.requests)
        response = chat(agent_client(key), run, {"messages": opening()})
        assert response.status_code == 409 and "is not serving" in response.json()["detail"], response.content
        assert len(upstream.requests) == before
