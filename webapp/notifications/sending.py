"""One delivery attempt: the e-mail to one person, or the signed POST to one webhook.

`notification_deliver` returns the seconds to wait before the next attempt, or None when the delivery is done
(sent, or given up after STUDIO_NOTIFY_ATTEMPTS, or refused by the egress policy, which no retry changes). The
Celery task retries it with that countdown; the in-process executor's thread sleeps it (`..._until_done`). Each
attempt claims the delivery with a conditional UPDATE, so a task delivered twice never sends twice at once.

A webhook's body is signed: header `X-Studio-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`
with the webhook's secret; a receiver recomputes it and refuses a timestamp older than a few minutes (replay).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

import egress
from webapp.egress_policy import egress_policy
from webapp.models import Delivery, Notification, NotifyEvent, Webhook, WebhookFormat
from webapp.services.secrets import secret_decrypt

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Studio-Signature"
MAX_BACKOFF_S = 3600.0
_VERBS = {NotifyEvent.AWAITING_REVIEW: "is waiting for review",
          NotifyEvent.PAUSED_BY_MONITOR: "was paused by a monitor",
          NotifyEvent.OVER_BUDGET: "was paused: its judge budget is spent", NotifyEvent.FAILED: "failed",
          NotifyEvent.COMPLETED: "completed",
          NotifyEvent.JUDGE_DOWN: "waits for its judge (the judge's provider is down; the run resumes by itself)"}


def webhook_signature(*, secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    link: str


def notification_message(notification: Notification) -> Message:
    """What every channel says: the run, what happened, and the page that needs the person (an absolute link
    where STUDIO_PUBLIC_URL is set, else the path)."""
    run = notification.run
    page = "run-review" if notification.event == NotifyEvent.AWAITING_REVIEW else "run-detail"
    link = settings.STUDIO_PUBLIC_URL + reverse(page, args=[run.pk])
    said = f"Run “{run.name}” in project “{run.project.name}” {_VERBS.get(notification.event, notification.event)}"
    text = said + (f": {notification.detail}" if notification.detail else "")
    return Message(subject=f"[Rubric Studio] {said}"[:200], text=text, link=link)


def _slack_escaped(text: str) -> str:
    """Slack reads <…> as links and mentions (<!channel>): a run's name must not ping a channel."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_body(notification: Notification, message: Message, fmt: str) -> bytes:
    if fmt == WebhookFormat.SLACK:
        body: dict = {"text": f"{_slack_escaped(message.text)} <{message.link}|Open it>"}
    else:
        run = notification.run
        body = {"event": notification.event, "text": message.text, "link": message.link,
                "notification_id": notification.pk, "created_at": notification.created_at.isoformat(),
                "run": {"id": run.pk, "name": run.name, "status": run.status},
                "project": {"id": run.project_id, "name": run.project.name}}
    return json.dumps(body, ensure_ascii=False).encode()


def _send_email(delivery: Delivery, message: Message) -> None:
    send_mail(message.subject, f"{message.text}\n\nOpen it: {message.link}\n\nYou are told this because of your "
              f"notification settings in project “{delivery.notification.run.project.name}”.",
              None, [delivery.user.email], fail_silently=False)


def _post_webhook(delivery: Delivery, message: Message) -> None:
    """Raises on anything but a 2xx answer. The egress policy is checked again here, at the connection, and the
    pinned client connects to the address it checked (a name rebound since the save is refused)."""
    hook = delivery.webhook
    body = webhook_body(delivery.notification, message, hook.format)
    headers = {"Content-Type": "application/json", "User-Agent": "rubric-studio-notifications",
               SIGNATURE_HEADER: webhook_signature(secret=secret_decrypt(token=hook.secret_encrypted),
                                                   timestamp=int(time.time()), body=body),
               "X-Studio-Event": delivery.notification.event, "X-Studio-Delivery": str(delivery.pk)}
    with egress.sync_client(egress_policy(), timeout=settings.STUDIO_NOTIFY_TIMEOUT_S, follow_redirects=False) as c:
        c.post(hook.url, content=body, headers=headers).raise_for_status()


def notification_deliver(*, delivery_id: int) -> float | None:
    delivery = (Delivery.objects.select_related("notification__run__project", "user", "webhook")
                .filter(pk=delivery_id, state=Delivery.State.PENDING).first())
    if delivery is None:
        return None
    tried = delivery.attempts + 1
    if not Delivery.objects.filter(pk=delivery.pk, state=Delivery.State.PENDING,
                                   attempts=delivery.attempts).update(attempts=F("attempts") + 1):
        return None  # another attempt of the same delivery holds it
    message = notification_message(delivery.notification)
    try:
        if delivery.webhook_id is not None:
            _post_webhook(delivery, message)
        else:
            _send_email(delivery, message)
    except Exception as err:  # noqa: BLE001 - any failure is recorded and retried, never raised into the run
        refused = egress.egress_refusal(err) is not None
        detail = egress.failure_detail(err)[:480]
        last = refused or tried >= settings.STUDIO_NOTIFY_ATTEMPTS
        _failed(delivery, f"attempt {tried}: {detail}", final=last)
        return None if last else min(MAX_BACKOFF_S, settings.STUDIO_NOTIFY_BACKOFF_S * 2 ** (tried - 1))
    now = timezone.now()
    Delivery.objects.filter(pk=delivery.pk).update(state=Delivery.State.SENT, sent_at=now, last_error="")
    if delivery.webhook_id is not None:
        Webhook.objects.filter(pk=delivery.webhook_id).update(last_delivered_at=now, last_error="", last_error_at=None)
    return None


def _failed(delivery: Delivery, error: str, *, final: bool) -> None:
    state = Delivery.State.FAILED if final else Delivery.State.PENDING
    Delivery.objects.filter(pk=delivery.pk).update(state=state, last_error=error)
    where = f"webhook {delivery.webhook_id}" if delivery.webhook_id else f"e-mail to user {delivery.user_id}"
    log.warning("notification %s, %s: %s%s", delivery.notification_id, where, error, "" if final else "; retrying")
    if delivery.webhook_id is not None:  # shown on the project page until a delivery succeeds
        Webhook.objects.filter(pk=delivery.webhook_id).update(last_error=error, last_error_at=timezone.now())


def notification_deliver_until_done(*, delivery_id: int) -> None:
    """The embedded default's retry loop (a thread of the in-process executor, never the run's)."""
    while (delay := notification_deliver(delivery_id=delivery_id)) is not None:
        time.sleep(delay)
