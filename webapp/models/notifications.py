"""Telling people when a run needs them (webapp/notifications/): each person's preferences per project, a project's
webhooks, and one Notification per run event that tells someone, with one Delivery per e-mail or webhook."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.models.projects import Project
from webapp.models.runs import Run


class NotifyEvent(models.TextChoices):
    AWAITING_REVIEW = "awaiting_review", "A run awaits review"
    PAUSED_BY_MONITOR = "paused_by_monitor", "A monitor paused a run"
    OVER_BUDGET = "over_budget", "A run spent its judge budget"
    FAILED = "failed", "A run failed"
    COMPLETED = "completed", "A run completed"
    JUDGE_DOWN = "judge_down", "A run waits for its judge (provider down)"


ALL_EVENTS = [event.value for event in NotifyEvent]


def _all_events() -> list[str]:
    return list(ALL_EVENTS)


class NotificationPreference(models.Model):
    """One person's choice in one project. Without a row the person is told of every event, by e-mail, for the
    runs they launched (NOTIFY_DEFAULTS in webapp/notifications/recipients.py)."""
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="notification_preferences")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    events = models.JSONField(default=_all_events, help_text="NotifyEvent values this person is told of.")
    email = models.BooleanField(default=True)
    all_runs = models.BooleanField(default=False, help_text="Also the runs other members launched.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_notification_preference")]


class WebhookFormat(models.TextChoices):
    SLACK = "slack", "Slack-compatible ({\"text\": …})"
    JSON = "json", "JSON (event, run, project, link)"


class Webhook(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=500)
    format = models.CharField(max_length=8, choices=WebhookFormat.choices, default=WebhookFormat.SLACK)
    events = models.JSONField(default=_all_events)
    secret_encrypted = models.TextField(help_text="The signing secret, encrypted (services/secrets.py).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # The project page shows a failing webhook from these; a delivery that succeeds clears the error.
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]


class Notification(models.Model):
    """A run event that tells people: at most one per RunEvent (run, seq), so an event is never sent twice."""
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="notifications")
    seq = models.PositiveIntegerField(help_text="The RunEvent's sequence number.")
    event = models.CharField(max_length=24, choices=NotifyEvent.choices)
    detail = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="one_notification_per_run_event")]


class Delivery(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.CASCADE, related_name="+")
    webhook = models.ForeignKey(Webhook, null=True, on_delete=models.CASCADE, related_name="deliveries")
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["notification", "user"], name="one_email_per_notification_user"),
            models.UniqueConstraint(fields=["notification", "webhook"], name="one_post_per_notification_webhook"),
        ]
