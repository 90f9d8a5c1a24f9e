"""Try it's live channel (issue 48, webapp/live/try_channel.py): a session's socket admits members of its project
only, is sent the session as a reload shows it on connect and after each stored update, and, against the tiny
model's inference server started by the embedded executor, carries each column's first tokens before its answer
is whole."""
from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse

from tests.webapp.factories import agent_factory, member_factory, project_factory
from tests.webapp.live_socket import LiveSocket
from tests.webapp.serving_world import completed_run, lora_adapters, serving  # noqa: F401  (fixtures)
from webapp.models import TrySession

pytestmark = pytest.mark.django_db(transaction=True)

CSRF_SECRET = "a" * 16 + "B" * 16  # a CSRF cookie as Django sets it (32 letters and digits)


class TrySocket(LiveSocket):
    """The session's socket: one JSON object per message (not the run socket's arrays of events)."""

    def __init__(self, user, session_id: int) -> None:
        super().__init__(f"/ws/try/{session_id}/", user)
        self.scope["headers"] = [*self.scope["headers"], (b"cookie", f"csrftoken={CSRF_SECRET}".encode())]

    async def receive_state(self, timeout: float = 5) -> dict:
        return await WebsocketCommunicator.receive_json_from(self, timeout=timeout)


async def _refused_with(socket: TrySocket) -> int | None:
    connected, _ = await socket.connect()
    assert connected  # a refusal accepts the handshake and closes at once with its code
    message = await socket.receive_output(timeout=5)
    return message.get("code") if message["type"] == "websocket.close" else None


def _answering_session():
    project = project_factory()
    agent = agent_factory(project=project)
    session = TrySession.objects.create(
        project=project, agent=agent, created_by=project.owner, base_model="tiny", user_message="<b>refunds?</b>",
        columns=[{"label": "base", "checkpoint_id": None, "model": "base"}], status=TrySession.Status.RUNNING,
        answers=[{"status": "answering", "error": "", "seconds": None, "tools": None, "messages": [
            {"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "<b>refunds?</b>"},
            {"role": "assistant", "content": "Refunds <i>within"}]}])
    return session, member_factory(project=project), project_factory().owner


async def test_a_non_member_is_refused_and_a_member_is_sent_the_session_as_it_is_then_each_update():
    from django.contrib.auth.models import AnonymousUser

    from webapp.live.publish import try_session_publish

    session, viewer, other_projects_owner = await sync_to_async(_answering_session)()
    assert await _refused_with(TrySocket(AnonymousUser(), session.pk)) == 4401
    assert await _refused_with(TrySocket(other_projects_owner, session.pk)) == 4404  # a member of another project
    assert await _refused_with(TrySocket(viewer, session.pk + 1000)) == 4404  # no such session

    socket = TrySocket(viewer, session.pk)
    assert (await socket.connect())[0]
    now = await socket.receive_state()
    assert now["status"] == "running" and now["live"] is True
    assert now["columns"] == [{"status": "answering", "text": "Refunds <i>within"}]
    assert "Refunds &lt;i&gt;within" in now["html"] and 'data-live="1"' in now["html"]  # escaped, and still live
    assert "<i>" not in now["html"]

    def finish() -> None:
        answers = session.answers
        answers[0]["messages"][-1]["content"] = "Refunds <i>within 30 days."
        answers[0]["status"] = "done"
        TrySession.objects.filter(pk=session.pk).update(answers=answers, status=TrySession.Status.DONE)
        try_session_publish(session_id=session.pk)

    await sync_to_async(finish)()
    done = await socket.receive_state()
    assert done["status"] == "done" and done["live"] is False
    assert done["columns"] == [{"status": "done", "text": "Refunds <i>within 30 days."}]
    assert 'data-live="1"' not in done["html"] and "hx-trigger" not in done["html"]  # nothing polls once done
    await socket.disconnect()


def _normalised(html: str) -> str:
    """The partial without its CSRF tokens, which are masked afresh on every rendering."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', 'name="csrfmiddlewaretoken"', html)


async def test_a_sessions_socket_streams_growing_answers_in_order_and_ends_as_a_reload_shows(
        serving, lora_adapters, client):  # noqa: F811
    from webapp.services.trying import try_create

    def ask():
        project = project_factory()
        # Not the demo's board (a move of a few tokens): a question the tiny model answers at length.
        run = completed_run(project=project, model_dir=serving, adapters=lora_adapters[:1], max_tokens=64,
                            temperature=0.0, system_prompt="Answer briefly.")
        session = try_create(user=project.owner, project=project, agent=run.agent, include_base=True,
                             checkpoint_ids=[run.checkpoints.get().pk], message="What is the refund policy?")
        return session, project.owner

    session, owner = await sync_to_async(ask)()
    socket = TrySocket(owner, session.pk)
    assert (await socket.connect())[0]
    states = [await socket.receive_state()]
    while states[-1]["live"]:
        states.append(await socket.receive_state(timeout=120))
    await socket.disconnect()

    final = states[-1]
    stored = await sync_to_async(TrySession.objects.get)(pk=session.pk)
    assert final["status"] == "done", (stored.error, [a["error"] for a in stored.answers])
    assert [c["status"] for c in final["columns"]] == ["done", "done"]
    # What a socket can promise whatever the model's speed: the session streams while it runs (the page is sent
    # more than its first and last views), each column's text only grows, as a prefix of its final answer, and a
    # column never goes back from done. Whether a text shorter than the whole is caught depends on how long the
    # answer takes against the pace of the views (a tiny model answers in tens of milliseconds): that the child
    # reports the first tokens before the whole answer is shown without timing, line by line, in
    # test_try_streaming.py, and that the socket passes an answering column's part on, in the test above.
    live_views = [s for s in states if s["live"]]
    assert len(live_views) >= 2, states
    for column in (0, 1):
        whole = final["columns"][column]["text"]
        texts = [s["columns"][column]["text"] for s in states]
        assert all(whole.startswith(text) for text in texts), (column, texts, whole)
        assert [len(text) for text in texts] == sorted(len(text) for text in texts), (column, texts)
        statuses = [s["columns"][column]["status"] for s in states]
        assert "done" not in statuses[:-1] or all(x == "done" for x in statuses[statuses.index("done"):]), statuses

    assert [a["messages"][-1]["content"] for a in stored.answers] == [c["text"] for c in final["columns"]]

    def reload() -> str:
        client.force_login(owner)
        client.cookies["csrftoken"] = CSRF_SECRET
        return client.get(reverse("try-session", args=[session.pk]), HTTP_HX_REQUEST="true").content.decode()

    page = await sync_to_async(reload)()
    assert "Save as scenario" in page  # the owner's forms: the socket's last view has them too
    assert _normalised(final["html"]).strip() == _normalised(page).strip()
