"""The seam: which run events tell people, and who is told.

webapp/live/ingest.py appends every RunEvent, whichever code changed the run (the engine's events, a person's
click, the monitor and budget checks, the reaper), and calls `run_event_notify` inside that transaction, under the
run's row lock. An event tells people when it is the one where the run *entered* a state that needs them (the
previous event showed another status), so a run is announced once per entry, and each Notification is unique per
(run, event sequence number): no event is ever sent twice. Deliveries are handed to the executor on commit.
"""
from __future__ import annotations

from django.db import transaction

from webapp.execution.dispatch import NOTIFY_DELIVER, work_enqueue
from webapp.models import (Delivery, Membership, Notification, NotificationPreference, NotifyEvent, Run, RunEvent,
                           RunStatus, Webhook)

# How the pauses that need a person say why (webapp/services/monitoring.py, services/runs.py run_judge_budget_check);
# tests/webapp/test_notifications.py pauses a run through each of them.
MONITOR_PAUSE = "paused by the "
BUDGET_PAUSE = "paused: the judge budget"
JUDGE_WAIT = "waiting for the judge"  # webapp/live/judge_outage.py: a run parked for its judge's provider
# Without a preference row a member is told of every event by e-mail, for the runs they launched.
NOTIFY_DEFAULTS = {"events": [e.value for e in NotifyEvent], "email": True, "all_runs": False}


def event_of(*, status: str, phase: str) -> NotifyEvent | None:
    """The notification a run in `status` (with `phase`) stands for, or None."""
    if status == RunStatus.PAUSED:
        if phase.startswith(MONITOR_PAUSE):
            return NotifyEvent.PAUSED_BY_MONITOR
        if phase.startswith(JUDGE_WAIT):
            return NotifyEvent.JUDGE_DOWN
        return NotifyEvent.OVER_BUDGET if phase.startswith(BUDGET_PAUSE) else None
    return {RunStatus.AWAITING_REVIEW: NotifyEvent.AWAITING_REVIEW, RunStatus.FAILED: NotifyEvent.FAILED,
            RunStatus.COMPLETED: NotifyEvent.COMPLETED}.get(status)


def _detail(run: Run, event: NotifyEvent) -> str:
    text = run.error if event == NotifyEvent.FAILED else run.phase
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return first[:500]


def email_recipients(*, run: Run, event: str) -> list:
    """The members (the owner included) whose preferences ask for `event` of `run` by e-mail and who have an
    address; without a preference, the member who launched the run."""
    prefs = {p.user_id: p for p in NotificationPreference.objects.filter(project_id=run.project_id)}
    users = {m.user.pk: m.user for m in Membership.objects.filter(project_id=run.project_id).select_related("user")}
    users.setdefault(run.project.owner_id, run.project.owner)
    chosen = []
    for user_id, user in sorted(users.items()):
        pref = prefs.get(user_id)
        wanted = NOTIFY_DEFAULTS if pref is None else {"events": pref.events, "email": pref.email,
                                                        "all_runs": pref.all_runs}
        if (event in wanted["events"] and wanted["email"] and user.is_active and user.email
                and (wanted["all_runs"] or run.created_by_id == user_id)):
            chosen.append(user)
    return chosen


def run_event_notify(*, run: Run, event: RunEvent) -> Notification | None:
    """Records who is told of `event` (just appended for `run`, inside its transaction) and sends it on commit."""
    kind = event_of(status=run.status, phase=run.phase or "")
    if kind is None:
        return None
    previous = RunEvent.objects.filter(run_id=run.pk, seq=event.seq - 1).values_list("payload", flat=True).first()
    before = ((previous or {}).get("run") or {}).get("status")
    if before == run.status:  # still in the state that was announced when the run entered it
        return None
    detail = _detail(run, kind)
    if kind == NotifyEvent.AWAITING_REVIEW and run.notifications.filter(event=kind, detail=detail).exists():
        return None  # the same step asks again after a park: its reviewers were told already
    if kind == NotifyEvent.JUDGE_DOWN and run.judge_down_since is not None and run.notifications.filter(
            event=kind, created_at__gte=run.judge_down_since).exists():
        return None  # the same outage parks the run again at each retry: told once per outage
    users = email_recipients(run=run, event=kind)
    hooks = [h for h in Webhook.objects.filter(project_id=run.project_id) if kind in (h.events or [])]
    if not users and not hooks:
        return None
    notification = Notification.objects.create(run=run, seq=event.seq, event=kind, detail=detail)
    deliveries = Delivery.objects.bulk_create([Delivery(notification=notification, user=u) for u in users]
                                              + [Delivery(notification=notification, webhook=h) for h in hooks])
    ids = [d.pk for d in deliveries]

    def _send() -> None:
        for delivery_id in ids:
            work_enqueue(name=NOTIFY_DELIVER, object_id=delivery_id)

    transaction.on_commit(_send)
    return notification
