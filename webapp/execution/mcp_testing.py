"""An MCP server's "Test connection" on a worker (issue 33): never in the web process. An entry point, like the
Celery tasks: the task `mcp_server_test_task` (queue `judge`) or the embedded executor's `judge` pool runs it.

The server is started (stdio, from the deployment's catalogue, through the engine's sandbox) or reached (HTTP)
in a child process, `python -m training.environments.mcp_probe`, whose environment holds nothing of this
process's (no database URL, secret or encryption key, judge or API key): PATH, HOME, the locale, the sandbox's
limits and, for HTTP, the server's own header values. An HTTP server's host is checked against
STUDIO_MCP_ALLOWED_HOSTS here, and the child connects to the address that was checked (connect_to), so a name
rebound between the check and the connection (DNS rebinding) reaches nothing else.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from webapp.mcp_hosts import McpHostNotAllowed
from webapp.models import McpServer
from webapp.services.mcp_servers import mcp_server_secrets, mcp_server_spec, mcp_url_check
from webapp.storable import storable

log = logging.getLogger(__name__)
Status = McpServer.TestStatus
STARTUP_TIMEOUT_S = 20.0  # a person waits on the page: a run allows startup_timeout_s, 30 s by default
# What the probe child may inherit: where programs are, a home and a locale, and the sandbox's settings.
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "STUDIO_MCP_RUN_AS", "STUDIO_MCP_CPU_S",
              "STUDIO_MCP_MEMORY_MB", "STUDIO_MCP_WALL_S")


def probe_env(secrets: dict[str, str]) -> dict[str, str]:
    env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
    env.update(PYTHONUNBUFFERED="1", **secrets)
    return env


def _finish(server_id: int, *, ok: bool, error: str = "", tools: list | None = None, started: float) -> str:
    fields: dict = {"test_status": Status.OK if ok else Status.FAILED, "test_error": storable(error)[:5000],
                    "test_latency_s": time.monotonic() - started}
    if ok:
        fields.update(tools=storable(tools or []), tools_listed_at=timezone.now())
    McpServer.objects.filter(pk=server_id).update(**fields)
    return fields["test_status"]


def mcp_server_test_execute(*, server_id: int) -> str:
    if not McpServer.objects.filter(pk=server_id, test_status=Status.QUEUED).update(test_status=Status.RUNNING):
        return "skipped"
    server = McpServer.objects.get(pk=server_id)
    started = time.monotonic()
    try:
        spec = mcp_server_spec(server=server)
        if server.transport == McpServer.Transport.HTTP:
            spec["connect_to"] = str(mcp_url_check(url=server.url)[0])
    except McpHostNotAllowed as err:  # refused before any request leaves this machine
        return _finish(server_id, ok=False, error=f"McpHostNotAllowed: {err}", started=started)
    except ValidationError as err:
        return _finish(server_id, ok=False, error="; ".join(m for ms in err.message_dict.values() for m in ms),
                       started=started)
    startup = min(STARTUP_TIMEOUT_S, server.per_call_timeout_s)
    request = {"server": spec, "startup_timeout_s": startup, "per_call_timeout_s": server.per_call_timeout_s,
               "max_result_chars": server.max_result_chars}
    try:
        done = subprocess.run([sys.executable, "-m", "training.environments.mcp_probe"], input=json.dumps(request),
                              capture_output=True, text=True, env=probe_env(mcp_server_secrets(server=server)),
                              cwd=str(settings.BASE_DIR), timeout=startup + 30)
    except subprocess.TimeoutExpired:
        return _finish(server_id, ok=False, started=started,
                       error=f"McpStartTimeout: the connection test did not end within {startup + 30:g} s")
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        log.warning("MCP test of server %s ended with code %s:\n%s", server_id, done.returncode, done.stderr[-3000:])
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return _finish(server_id, ok=False, error=f"McpServerDidNotStart: the test ended without a result ({last})",
                       started=started)
    return _finish(server_id, ok=bool(result.get("ok")), error=str(result.get("error") or ""),
                   tools=result.get("tools"), started=started)
