"""Runs one Try it session on a worker (issue 37): waits for the project's inference server (started by the
request, on a `serve` worker), loads the chosen checkpoints into it by name, and rolls the agent's environment
out once per column in a child process (try_child.py: the agent's tools start there, never in the web process),
storing each turn on the session as it arrives and telling the pages showing it (live/try_channel.py: every
update below is followed by `try_session_publish`). An entry point: the Celery task `try_execute_task` (queue
`judge`) or the embedded executor's `try` pool."""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from webapp.execution.serving import serving_env
from webapp.live.publish import try_session_publish
from webapp.models import Checkpoint, ProjectServer, TrySession
from webapp.services.mcp_servers import mcp_agent_environment_options, mcp_agent_run_secrets, run_secrets_environment
from webapp.services.serving import project_server_touch, project_server_wait, serving_adapters_load
from webapp.services.trying import try_judge_execute
from webapp.storable import storable

log = logging.getLogger(__name__)
Status = TrySession.Status
POLL_S = 0.2


def try_judge(*, session_id: int) -> str:
    return try_judge_execute(session_id=session_id)


def _fail(session_id: int, error: str) -> str:
    TrySession.objects.filter(pk=session_id).update(status=Status.FAILED, error=storable(error)[:5000],
                                                    finished_at=timezone.now())
    try_session_publish(session_id=session_id)
    return Status.FAILED


def _wait_ready(session: TrySession) -> ProjectServer | str:
    """The ready server, or why it will not be."""
    told = time.monotonic()

    def beat() -> None:
        nonlocal told
        TrySession.objects.filter(pk=session.pk).update(heartbeat_at=timezone.now())
        if time.monotonic() - told >= 1.0:  # the page says for how long the server has been starting
            told = time.monotonic()
            try_session_publish(session_id=session.pk)

    return project_server_wait(server_id=session.server_id, poll_s=POLL_S, beat=beat)


def _spec(session: TrySession, server: ProjectServer) -> dict:
    agent = session.agent
    options = mcp_agent_environment_options(agent=agent) if agent.environment_kind == "mcp" \
        else agent.environment_options or {}
    scenario = {"id": session.scenario.external_id if session.scenario else f"try-{session.pk}",
                "user_message": session.user_message, "context": session.context or None,
                "metadata": dict(session.scenario.metadata or {}) if session.scenario else {}}
    return {"base_url": server.base_url, "token": settings.STUDIO_INFERENCE_TOKEN,
            "environment": {"kind": agent.environment_kind, "options": options},
            "system_prompt": session.system_prompt, "scenario": scenario,
            "sampling": {"temperature": agent.temperature, "top_p": agent.top_p, "max_tokens": agent.max_tokens},
            "models": [c["model"] for c in session.columns], "timeout_s": settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S}


def try_execute(*, session_id: int) -> str:
    if not TrySession.objects.filter(pk=session_id, status=Status.QUEUED).update(
            status=Status.STARTING, heartbeat_at=timezone.now()):
        return "skipped"
    try_session_publish(session_id=session_id)
    session = TrySession.objects.select_related("agent", "scenario").get(pk=session_id)
    if session.agent is None or session.server_id is None:
        return _fail(session_id, "the agent of this session was deleted")
    waited = time.monotonic()
    server = _wait_ready(session)
    if isinstance(server, str):
        return _fail(session_id, server)
    if not TrySession.objects.filter(pk=session_id, status=Status.STARTING).update(
            status=Status.RUNNING, server_wait_s=time.monotonic() - waited):
        return "ended"  # a person ended it while it waited (services.trying.try_end)
    try_session_publish(session_id=session_id)
    try:
        checkpoints = Checkpoint.objects.in_bulk([c["checkpoint_id"] for c in session.columns if c["checkpoint_id"]])
        serving_adapters_load(server=server, checkpoints=[checkpoints[c["checkpoint_id"]] for c in session.columns
                                                          if c["checkpoint_id"]])
        spec = _spec(session, server)
        env = serving_env()
        if session.agent.environment_kind == "mcp":  # the MCP server's header values, as a run gets them
            env.update(run_secrets_environment(secrets_encrypted=mcp_agent_run_secrets(agent=session.agent)))
    except Exception as err:  # noqa: BLE001 - shown on the session
        return _fail(session_id, f"{type(err).__name__}: {err}")
    return _roll_out(session, server, spec, env)


def _roll_out(session: TrySession, server: ProjectServer, spec: dict, env: dict[str, str]) -> str:
    proc = subprocess.Popen([sys.executable, "-m", "webapp.execution.try_child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(settings.BASE_DIR))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(spec) + "\n").encode())
    proc.stdin.close()
    answers, failure = list(session.answers), ""
    buffer, fd, checked = b"", proc.stdout.fileno(), time.monotonic()
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if time.monotonic() - checked >= 1.0:
            checked = time.monotonic()
            if _ended(session.pk):  # a person ended it: its place under the caps is free, so its work stops
                proc.kill()
        if not ready:
            project_server_touch(server_id=server.pk)
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            failure = _record(session, answers, line) or failure
        project_server_touch(server_id=server.pk)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = proc.wait()
    if code != 0 and not failure:
        failure = (stderr.strip().splitlines() or [f"exit code {code}"])[-1]
    if code != 0:
        log.warning("Try it session %s: the rollouts ended with code %s:\n%s", session.pk, code, stderr[-5000:])
    for answer in answers:
        if answer["status"] in ("waiting", "answering"):
            answer.update(status="failed", error=answer.get("error") or failure or "the rollout ended unfinished")
    TrySession.objects.filter(pk=session.pk, status=Status.RUNNING).update(
        answers=storable(answers), status=Status.DONE if any(a["status"] == "done" for a in answers) else Status.FAILED,
        error=storable(failure)[:5000], finished_at=timezone.now())
    try_session_publish(session_id=session.pk)
    close_old_connections()
    return Status.DONE


def _ended(session_id: int) -> bool:
    return not TrySession.objects.filter(pk=session_id, status=Status.RUNNING).exists()


def _record(session: TrySession, answers: list[dict], line: bytes) -> str:
    """Stores one line of the child's on the session; returns a failure of the whole session, if it is one."""
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    column = record.get("column")
    if not isinstance(column, int) or not 0 <= column < len(answers):
        return str(record.get("error") or "")
    answer = answers[column]
    if "messages" in record:
        answer["messages"] = record["messages"]
    if "tools" in record:
        answer["tools"] = record["tools"]
    answer["status"] = record.get("status", answer["status"])
    answer["error"] = str(record.get("error") or "")[:2000]
    if record.get("seconds") is not None:
        answer["seconds"] = float(record["seconds"])
    fields: dict = {"answers": storable(answers), "heartbeat_at": timezone.now()}
    if answer["status"] == "done" and session.first_answer_s is None:
        session.first_answer_s = (timezone.now() - session.created_at).total_seconds()
        fields["first_answer_s"] = session.first_answer_s
    TrySession.objects.filter(pk=session.pk).update(**fields)
    try_session_publish(session_id=session.pk)
    return ""
