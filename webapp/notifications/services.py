"""What people change: their own notification preferences (every member) and the project's webhooks (editors).

A webhook's URL passes the egress policy when it is saved (and again at each connection, webapp/notifications/
sending.py); its signing secret is made here, stored encrypted and shown to the editor once, on the answer to
the form, like a project token's key.
"""
from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.egress_policy import egress_refusal
from webapp.limits import limit_check
from webapp.models import NotificationPreference, NotifyEvent, Project, Role, Webhook, WebhookFormat
from webapp.services.access import require_role
from webapp.services.secrets import secret_encrypt

SECRET_PREFIX = "whsec_"


def _events(events: list[str]) -> list[str]:
    unknown = sorted(set(events) - set(NotifyEvent.values))
    if unknown:
        raise ValidationError({"events": [f"unknown event {unknown[0]!r}; one of {', '.join(NotifyEvent.values)}"]})
    return [e for e in NotifyEvent.values if e in events]  # one order everywhere


def notification_preference_set(*, user, project: Project, events: list[str], email: bool,
                                all_runs: bool) -> NotificationPreference:
    """The person's own choice in `project` (any member, for themselves only)."""
    require_role(user=user, project=project, role=Role.VIEWER)
    pref, _ = NotificationPreference.objects.update_or_create(
        project=project, user=user, defaults={"events": _events(events), "email": email, "all_runs": all_runs})
    return pref


def webhook_create(*, user, project: Project, url: str, fmt: str, events: list[str]) -> tuple[Webhook, str]:
    """The new webhook and its signing secret (shown once; stored encrypted)."""
    require_role(user=user, project=project, role=Role.EDITOR)
    url = (url or "").strip()
    if fmt not in WebhookFormat.values:
        raise ValidationError({"format": [f"choose one of {', '.join(WebhookFormat.values)}"]})
    if not url.lower().startswith(("http://", "https://")):
        raise ValidationError({"url": ["give an http:// or https:// address"]})
    if len(url) > 500:
        raise ValidationError({"url": ["a webhook address is at most 500 characters"]})
    if (refusal := egress_refusal(url)) is not None:
        raise ValidationError({"url": [refusal]})
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()  # two saves at once count each other
        limit_check(limit_name="webhooks", usage=project.webhooks.count())
        hook = Webhook.objects.create(project=project, url=url, format=fmt, events=_events(events),
                                      secret_encrypted=secret_encrypt(plaintext=secret), created_by=user)
    return hook, secret


def webhook_delete(*, user, webhook: Webhook) -> None:
    require_role(user=user, project=webhook.project, role=Role.EDITOR)
    webhook.delete()
