"""Reads for Try it and the project's server (issue 37): what the session page shows, from the rows alone."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from training.types import trajectory_label
from webapp.models import Checkpoint, ProjectServer, TrySession


def project_server_problem(server: ProjectServer, *, now=None) -> str | None:
    """Why a server the row calls starting or ready is not (its worker stopped beating, or no worker took its
    start in time), or None."""
    now = now or timezone.now()
    if server.status == ProjectServer.Status.STARTING:
        since = server.heartbeat_at or server.requested_at
        limit = settings.STUDIO_SERVE_START_TIMEOUT_S if server.heartbeat_at is None else settings.STUDIO_STALE_AFTER_S
        if since is not None and now - since > timedelta(seconds=limit):
            if server.heartbeat_at is None:
                return (f"no worker took the server's start within {limit:.0f} s (STUDIO_SERVE_START_TIMEOUT_S): "
                        "is a worker consuming queue `serve` running?")
            return f"the worker starting the server stopped sending heartbeats ({server.worker})"
    if server.status == ProjectServer.Status.READY and server.heartbeat_at is not None \
            and now - server.heartbeat_at > timedelta(seconds=settings.STUDIO_STALE_AFTER_S):
        return f"the worker holding the server stopped sending heartbeats ({server.worker})"
    return None


def server_line(*, server: ProjectServer | None, session: TrySession | None = None) -> str:
    """What the server is doing, in a sentence: starting (for how long), how long its start took, or why not."""
    if server is None:
        return "no inference server was asked for"
    if server.status == ProjectServer.Status.STARTING:
        waited = (timezone.now() - server.requested_at).total_seconds() if server.requested_at else 0.0
        where = f" on {server.worker}" if server.worker else " (waiting for a worker on queue serve)"
        return f"starting the inference server{where}: {waited:.0f} s so far"
    if server.status == ProjectServer.Status.FAILED:
        return f"the inference server failed: {server.error}"
    if session is not None and session.server_wait_s is not None:
        if session.server_started and server.startup_s is not None:
            return f"the inference server started for this session in {server.startup_s:.1f} s"
        return f"the inference server was up already (waited {session.server_wait_s:.1f} s)"
    if server.status == ProjectServer.Status.READY:
        return f"the inference server is up (it started in {server.startup_s or 0:.1f} s)"
    return f"the inference server is stopped{f': {server.stop_reason}' if server.stop_reason else ''}"


def try_session_view(*, session: TrySession) -> dict[str, Any]:
    results = session.judge_results or []
    checkpoints = Checkpoint.objects.select_related("run").in_bulk(
        [c["checkpoint_id"] for c in session.columns if c.get("checkpoint_id")])
    columns = []
    for i, (column, answer) in enumerate(zip(session.columns, session.answers)):
        checkpoint = checkpoints.get(column.get("checkpoint_id"))
        # Which model answers, in words: the base, or which run's checkpoint at which step.
        source = "base model, no checkpoint" if not column.get("checkpoint_id") else (
            f"checkpoint of run {checkpoint.run.name}, step {checkpoint.step_index}" if checkpoint
            else "checkpoint (deleted since)")
        messages = [m for m in answer.get("messages") or [] if isinstance(m, dict)]
        shown = messages[1:] if messages and messages[0].get("role") == "system" else messages
        final = next((str(m.get("content")) for m in reversed(messages)
                      if m.get("role") == "assistant" and m.get("content")), "")
        columns.append({"index": i, "letter": trajectory_label(i), "label": column["label"], "source": source,
                        "checkpoint_id": column.get("checkpoint_id"), "status": answer.get("status", "waiting"),
                        "messages": shown, "final": final, "error": answer.get("error") or "",
                        "seconds": answer.get("seconds"), "judged": results[i] if i < len(results) else None})
    return {"columns": columns, "server_line": server_line(server=session.server, session=session),
            "answered": sum(c["status"] == "done" for c in columns),
            "answering": any(c["status"] == "answering" for c in columns)}
