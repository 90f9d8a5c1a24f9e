"""Reads for external rollouts: which run a token may drive, the step the engine waits for (from the run's
`rollouts_wanted` / `rollouts_closed` events), the run page's panel, and the groups the runner forwards."""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Iterable

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.utils import timezone

from webapp.models import ExternalCall, ExternalClient, ExternalGroup, ProjectToken, Role, Run, RunEvent, RunStatus
from webapp.models.runs import ACTIVE_STATUSES
from webapp.selectors.access import run_get

CONNECTED_S = 30  # a client seen this recently is shown as connected


def external_run_get(*, user, token: Any, run_id: int) -> Run:
    """The run, for an editor of its project (user token or session), or for a project token of its project:
    another project's token gets 403, a non-member 404, a member below editor 403."""
    if isinstance(token, ProjectToken):
        project_id = Run.objects.filter(pk=run_id).values_list("project_id", flat=True).first()
        if project_id is not None and project_id != token.project_id:
            raise PermissionDenied(f"this token belongs to project {token.project.name!r}; the run is in another "
                                   "project")
    return run_get(user=user, run_id=run_id, role=Role.EDITOR)


def is_external(run: Run) -> bool:
    return (run.config.get("environment") or {}).get("kind") == "external"


def rollouts_wanted_latest(*, run: Run) -> RunEvent | None:
    return RunEvent.objects.filter(run=run, kind="rollouts_wanted").order_by("-seq").first()


def rollouts_open_step(*, run: Run, wanted: RunEvent | None = None) -> RunEvent | None:
    """The newest `rollouts_wanted` (`wanted`, when the caller has it) not followed by the `rollouts_closed` of its
    step, while the run is active."""
    wanted = wanted or rollouts_wanted_latest(run=run)
    if wanted is None or run.status not in ACTIVE_STATUSES:
        return None
    step = wanted.payload.get("step")
    closed = RunEvent.objects.filter(run=run, kind="rollouts_closed", seq__gt=wanted.seq,
                                     payload__step=step).exists()
    return None if closed else wanted


def _paused_seconds(run: Run, since: RunEvent, now: datetime) -> float:
    """Time the run spent paused since `since` (the engine does not count it against a step's groups): from the
    run summary every event carries."""
    paused = 0.0
    started = since.created_at if (since.payload.get("run") or {}).get("status") == RunStatus.PAUSED else None
    for created, summary in (RunEvent.objects.filter(run=run, seq__gt=since.seq).order_by("seq")
                             .values_list("created_at", "payload__run")):
        is_paused = (summary or {}).get("status") == RunStatus.PAUSED
        if is_paused and started is None:
            started = created
        elif not is_paused and started is not None:
            paused += (created - started).total_seconds()
            started = None
    if started is not None:
        paused += (now - started).total_seconds()
    return paused


def rollouts_state(*, run: Run, openai_base_url: str, now: datetime | None = None) -> dict[str, Any]:
    """What the user's code needs to roll out the current step (the contract of `GET /api/runs/<id>/rollouts/`).
    Scenarios go without reference answers: those are the judge's."""
    now = now or timezone.now()
    wanted = rollouts_open_step(run=run)
    data = wanted.payload if wanted else {}
    environment = (run.config.get("environment") or {}).get("options") or {}
    step = int(wanted.payload["step"]) if wanted else None
    submitted = set(ExternalGroup.objects.filter(run=run, step=step).values_list("group_index", flat=True)) \
        if step is not None else set()
    deadline = None
    if wanted is not None:
        elapsed = (now - wanted.created_at).total_seconds() - _paused_seconds(run, wanted, now)
        deadline = max(0.0, float(data.get("timeout_s") or 0) - elapsed)
    return {
        "run": run.pk, "name": run.name, "status": run.status, "step": step,
        "model": data.get("model") if wanted else None, "deadline_s": deadline,
        "timeout_s": float(data.get("timeout_s") or environment.get("group_timeout_s") or 600.0),
        "on_missing": str(data.get("on_missing") or environment.get("on_missing") or "skip"),
        "allow_unsampled": bool(data.get("allow_unsampled", environment.get("allow_unsampled", False))),
        "group_size": int(data.get("group_size") or (run.config.get("grpo") or {}).get("group_size") or 0),
        "system_prompt": str(data.get("system_prompt", run.config.get("system_prompt") or "")),
        "sampling": data.get("sampling") or run.config.get("sampling") or {},
        "total_steps": run.total_steps, "openai_base_url": openai_base_url,
        "groups": [{"group_index": int(g["group_index"]), "scenario": g.get("scenario") or {},
                    "submitted": int(g["group_index"]) in submitted}
                   for g in (data.get("groups") or [])] if wanted else [],
    }


def external_panel(*, run: Run, now: datetime | None = None) -> dict[str, Any]:
    """The run page's panel: connected clients, the step's groups submitted / wanted, time left, the policy."""
    now = now or timezone.now()
    state = rollouts_state(run=run, openai_base_url="", now=now)
    clients = list(ExternalClient.objects.filter(run=run, last_seen__gte=now - timedelta(seconds=CONNECTED_S))
                   .order_by("client_id"))
    return {**state, "clients": clients, "submitted": sum(g["submitted"] for g in state["groups"]),
            "wanted": len(state["groups"]), "groups_total": ExternalGroup.objects.filter(run=run).count(),
            "calls_total": ExternalCall.objects.filter(run=run).count(),
            "calls_keep_days": settings.STUDIO_EXTERNAL_CALLS_KEEP_DAYS}


def external_calls_jsonl(*, run: Run) -> Iterable[str]:
    """The run's recorded calls, one JSON line each, oldest first, as stored: `messages` are the ones the call
    added after its `parent` call's (all it was sent when it has none), so a call's whole request is its
    parent's whole request followed by its own messages."""
    rows = ExternalCall.objects.filter(run=run).order_by("id")
    for call in rows.iterator(chunk_size=200):
        yield json.dumps({
            "id": call.pk, "trajectory_id": call.trajectory_key, "step": call.step, "parent": call.parent_id,
            "messages": call.messages, "tools": call.tools, "model": call.model, "choices": call.choices,
            "completion_tokens": call.completion_tokens, "created": call.created.isoformat()},
            ensure_ascii=False) + "\n"


def external_groups_to_forward(*, run_id: int, after_step: int | None = None) -> list[ExternalGroup]:
    """Groups the engine has not been sent yet; with `after_step`, every group of a later step (an engine that
    just started has none of them)."""
    groups = ExternalGroup.objects.filter(run_id=run_id)
    groups = groups.filter(step__gt=after_step) if after_step is not None else groups.filter(forwarded_at=None)
    return list(groups.order_by("step", "group_index"))


def external_last_trained_step(*, run_id: int) -> int:
    """The step a starting engine resumes after: its last checkpoint's (0 before any)."""
    from webapp.models import Checkpoint

    return Checkpoint.objects.filter(run_id=run_id).order_by("-step_index").values_list(
        "step_index", flat=True).first() or 0


def project_tokens(*, project) -> list[ProjectToken]:
    return list(ProjectToken.objects.filter(project=project).select_related("created_by")
                .order_by(F("revoked_at").asc(nulls_first=True), "-created_at", "-id"))
