"""Notifications (issue 49): a run that needs people tells them once, by e-mail and by a signed webhook, retried
after a failure, never sent to an address the egress policy refuses; editors manage webhooks, every member their
own preferences. Deliveries go through the in-process executor's threads against a receiver double on loopback
(tests/webapp/settings.py lists loopback as allowed, as a deployment's administrator would)."""
from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from django.core import mail

from tests.webapp.factories import PASSWORD, judge_factory, member_factory, project_factory, run_factory, user_factory
from tests.http_receiver import start_receiver
from webapp.live.ingest import run_event_ingest, run_status_publish
from webapp.limits import ProjectLimits
from webapp.models import Delivery, JudgeCall, Notification, NotifyEvent, Role, Run, RunStatus, Webhook
from webapp.notifications.sending import notification_deliver_until_done
from webapp.notifications.services import notification_preference_set, webhook_create
from webapp.services.monitoring import run_monitor_pause_check
from webapp.services.runs import run_judge_budget_check

EVENTS = [e.value for e in NotifyEvent]


@pytest.fixture
def receiver():
    recv, server = start_receiver()
    yield recv
    server.shutdown()
    server.server_close()


@pytest.fixture
def quick_retries(settings):
    settings.STUDIO_NOTIFY_BACKOFF_S = 0.01
    settings.STUDIO_PUBLIC_URL = "https://studio.example"


def _verified(secret: str, received) -> dict:
    """What a receiver does (docs/webapp.md "Notifications"): recompute the HMAC over "<t>." + body, compare in
    constant time, refuse an old timestamp."""
    fields = dict(part.split("=", 1) for part in received.headers["x-studio-signature"].split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + received.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(expected, fields["v1"]), "the signature does not verify"
    assert abs(time.time() - int(fields["t"])) < 300
    return json.loads(received.body)


def _running_run(*, launcher, **fields):
    project = fields.pop("project", None) or project_factory(owner=launcher)
    run = run_factory(project=project, status=RunStatus.RUNNING, created_by=launcher, **fields)
    run_status_publish(run_id=run.id)  # the run's history so far: it is running
    return run


def _drive(event: str, run) -> None:
    """Brings the run into `event`'s state through the code paths that do it in a real run."""
    if event == NotifyEvent.AWAITING_REVIEW:
        run_event_ingest(run_id=run.id, event={"kind": "review_requested", "step": 1})
    elif event == NotifyEvent.PAUSED_BY_MONITOR:
        run_event_ingest(run_id=run.id, event={"kind": "monitor_alert", "step": 1, "monitor": "length",
                                               "message": "answers doubled in length", "pause": True})
        assert run_monitor_pause_check(run_id=run.id)
    elif event == NotifyEvent.OVER_BUDGET:
        JudgeCall.objects.create(run=run, judge_model="openai/judge", cost_usd=1.5)
        assert run_judge_budget_check(run_id=run.id)
    elif event == NotifyEvent.FAILED:
        run_event_ingest(run_id=run.id, event={"kind": "run_failed", "step": 1, "error": "the GPU ran out of memory"})
    else:
        run_event_ingest(run_id=run.id, event={"kind": "run_finished", "status": "completed", "steps_done": 2})


def test_each_event_reaches_the_launchers_mail_and_the_webhook_once_signed(
        transactional_db, inprocess_executor, quick_retries, receiver):
    from webapp.execution.executors import wait_idle

    launcher = user_factory(email="launcher@example.com")
    project = project_factory(owner=launcher)
    member_factory(project=project, role=Role.EDITOR, user=user_factory(email="other@example.com"))  # not told
    _, secret = webhook_create(user=launcher, project=project, url=receiver.url + "/hook", fmt="slack",
                               events=EVENTS)
    judge = judge_factory(project=project, budget_usd=1)
    # A judge outage parks the run through its engine: tests/webapp/test_judge_outage.py tells it.
    for event in [e for e in EVENTS if e != NotifyEvent.JUDGE_DOWN]:
        mail.outbox.clear()
        receiver.received.clear()
        run = _running_run(launcher=launcher, project=project, judge_config=judge, review_gate=True)

        _drive(event, run)
        run_status_publish(run_id=run.id)  # a later event in the same state tells nobody again
        wait_idle(timeout=30)

        assert [m.to for m in mail.outbox] == [["launcher@example.com"]], event
        page = "review/" if event == NotifyEvent.AWAITING_REVIEW else ""
        link = f"https://studio.example/runs/{run.id}/{page}"
        assert link in mail.outbox[0].body and run.name in mail.outbox[0].subject, event
        assert len(receiver.received) == 1, event
        body = _verified(secret, receiver.received[0])
        assert f"<{link}|Open it>" in body["text"], event
        assert receiver.received[0].headers["x-studio-event"] == event
        assert Notification.objects.get(run=run).event == event


def test_a_webhook_that_answers_500_is_retried_after_a_backoff_then_delivered(
        transactional_db, inprocess_executor, quick_retries, receiver):
    from webapp.execution.executors import wait_idle

    launcher = user_factory()  # no e-mail address: only the webhook is sent
    project = project_factory(owner=launcher)
    _, secret = webhook_create(user=launcher, project=project, url=receiver.url, fmt="json", events=EVENTS)
    receiver.statuses = [500]
    run = _running_run(launcher=launcher, project=project)
    _drive(NotifyEvent.COMPLETED, run)
    wait_idle(timeout=30)

    assert len(receiver.received) == 2
    first, second = (_verified(secret, r) for r in receiver.received)
    assert first == second and first["event"] == "completed" and first["run"]["id"] == run.id
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts) == (Delivery.State.SENT, 2)
    hook = Webhook.objects.get()
    assert hook.last_error == "" and hook.last_delivered_at is not None


def test_a_failing_webhook_shows_on_the_project_page_and_the_run_still_completes(
        client, db, quick_retries, receiver, settings):
    settings.STUDIO_NOTIFY_ATTEMPTS = 2
    launcher = user_factory()
    project = project_factory(owner=launcher)
    webhook_create(user=launcher, project=project, url=receiver.url, fmt="slack", events=EVENTS)
    receiver.statuses = [503, 503]
    run = _running_run(launcher=launcher, project=project)
    _drive(NotifyEvent.COMPLETED, run)
    notification_deliver_until_done(delivery_id=Delivery.objects.get().id)  # the embedded executor's loop

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert len(receiver.received) == 2 and Delivery.objects.get().state == Delivery.State.FAILED
    client.login(username=launcher.username, password=PASSWORD)
    page = client.get(f"/projects/{project.id}/").content.decode()
    assert "failing-webhook" in page and "127.0.0.1" in page and "attempt 2: HTTP 503" in page


def test_the_celery_task_retries_a_failed_post_then_delivers(db, quick_retries, receiver):
    from webapp.tasks import notification_deliver_task

    launcher = user_factory()
    project = project_factory(owner=launcher)
    _, secret = webhook_create(user=launcher, project=project, url=receiver.url, fmt="slack", events=EVENTS)
    run = _running_run(launcher=launcher, project=project)
    Run.objects.filter(pk=run.pk).update(name="<!channel> fjords & co")  # as a person named it at launch
    receiver.statuses = [500]
    _drive(NotifyEvent.FAILED, run)  # its message would go to the broker on commit: the task runs here instead
    notification_deliver_task.apply(args=[Delivery.objects.get().id])

    assert len(receiver.received) == 2
    assert Delivery.objects.get().state == Delivery.State.SENT
    text = _verified(secret, receiver.received[1])["text"]  # a run's name cannot mention a Slack channel
    assert "&lt;!channel&gt; fjords &amp; co" in text and "<!channel>" not in text


def test_a_webhook_to_the_metadata_address_or_a_private_host_is_refused_on_save_with_a_clear_error(
        client, db, settings):
    settings.STUDIO_EGRESS_ALLOWED_HOSTS, settings.STUDIO_MCP_ALLOWED_HOSTS = [], []  # a shared deployment
    editor = user_factory()
    project = project_factory(owner=editor)
    client.login(username=editor.username, password=PASSWORD)
    url = f"/projects/{project.id}/notifications/"
    for address, said in [("http://169.254.169.254/latest/meta-data/", "never allowed"),
                          ("http://10.1.2.3:8080/hook", "loopback or private address"),
                          ("http://127.0.0.1:9/hook", "loopback or private address")]:
        answer = client.post(url, {"action": "webhook", "url": address, "format": "slack", "events": EVENTS})
        assert answer.status_code == 400
        assert said in answer.content.decode()
    assert not Webhook.objects.exists()


def test_a_webhook_whose_address_is_no_longer_allowed_is_refused_at_connection_and_sent_nothing(
        db, quick_retries, receiver, settings):
    launcher = user_factory()
    project = project_factory(owner=launcher)
    webhook_create(user=launcher, project=project, url=receiver.url, fmt="slack", events=EVENTS)
    settings.STUDIO_EGRESS_ALLOWED_HOSTS, settings.STUDIO_MCP_ALLOWED_HOSTS = [], []  # checked again at connection
    run = _running_run(launcher=launcher, project=project)
    _drive(NotifyEvent.FAILED, run)
    notification_deliver_until_done(delivery_id=Delivery.objects.get().id)

    assert receiver.received == []
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts) == (Delivery.State.FAILED, 1)  # a refusal is not retried
    assert "loopback or private address" in delivery.last_error


def test_a_viewer_cannot_add_a_webhook_but_sets_their_own_preferences(client, db):
    project = project_factory()
    viewer = member_factory(project=project, role=Role.VIEWER)
    outsider = user_factory()
    url = f"/projects/{project.id}/notifications/"
    client.login(username=viewer.username, password=PASSWORD)
    assert client.post(url, {"action": "webhook", "url": "https://hooks.example.com/x", "format": "slack",
                             "events": EVENTS}).status_code == 403
    assert not Webhook.objects.exists()
    answer = client.post(url, {"action": "preferences", "events": ["failed"], "email": "on", "all_runs": "on"})
    assert answer.status_code == 302
    pref = project.notification_preferences.get(user=viewer)
    assert (pref.events, pref.email, pref.all_runs) == (["failed"], True, True)
    client.login(username=outsider.username, password=PASSWORD)
    assert client.get(url).status_code == 404


def test_members_are_told_as_their_preferences_say(db):
    from webapp.notifications.events import email_recipients

    launcher = user_factory(email="launcher@example.com")
    project = project_factory(owner=launcher)
    watcher = member_factory(project=project, user=user_factory(email="watcher@example.com"))
    member_factory(project=project, user=user_factory(email="quiet@example.com"))  # no preference: not launcher
    run = run_factory(project=project, created_by=launcher)
    notification_preference_set(user=watcher, project=project, events=["failed"], email=True, all_runs=True)
    notification_preference_set(user=launcher, project=project, events=EVENTS, email=False, all_runs=False)

    assert [u.email for u in email_recipients(run=run, event="failed")] == ["watcher@example.com"]
    assert email_recipients(run=run, event="completed") == []


def test_a_project_over_its_webhook_limit_is_refused_naming_the_limit(client, db, settings):
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(webhooks=1)
    editor = user_factory()
    project = project_factory(owner=editor)
    client.login(username=editor.username, password=PASSWORD)
    url = f"/projects/{project.id}/notifications/"
    first = client.post(url, {"action": "webhook", "url": "https://hooks.example.com/a", "format": "json",
                              "events": EVENTS})
    assert first.status_code == 200 and "whsec_" in first.content.decode()
    second = client.post(url, {"action": "webhook", "url": "https://hooks.example.com/b", "format": "json",
                               "events": EVENTS})
    assert second.status_code == 409 and "project limit webhooks exceeded" in second.content.decode()
    assert Webhook.objects.count() == 1
