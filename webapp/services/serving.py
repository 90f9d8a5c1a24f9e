"""The project's on-demand inference server, as the web app asks for it (issue 37; docs/use.md).

One server per project and base model: `project_server_request` starts it when it is not up (a `serve` task on a
worker, or the embedded executor's child process; never in the web process) and marks it used; the worker that
holds it (webapp/execution/serving.py) stops it after STUDIO_SERVE_IDLE_S without use. Adapters are loaded into it
by name from the checkpoint rows (never from a path anyone typed), least recently used unloaded first beyond
STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS, with the bookkeeping the run's endpoint uses (external_checkpoints.py).
The feature starts here; its parts: server_caps.py (what the deployment admits), services/serving_proxy.py,
execution/serving.py, selectors/serving.py, models/serving.py, api/serving_views.py (docs/webapp.md, "Where each
feature lives").
"""
from __future__ import annotations

import time
from typing import Callable

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.execution.dispatch import SERVER_HOLD, work_enqueue
from webapp.models import Checkpoint, Project, ProjectServer
from webapp.selectors.serving import project_server_problem
from webapp.server_caps import servers_admit
from webapp.services.external_checkpoints import checkpoint_used

SERVED_BASE = "base"  # the name the server gives the base model
Status = ProjectServer.Status


def served_adapter_name(checkpoint: Checkpoint) -> str:
    """The checkpoint's name on the project's server: its adapter name (`<run>@<step>`), made unique in the
    project by its id (two runs may share a name)."""
    return f"{checkpoint.adapter_name}#{checkpoint.pk}"


def server_headers() -> dict[str, str]:
    """The deployment's inference token, which the servers the workers start require of every request."""
    return {"Authorization": f"Bearer {settings.STUDIO_INFERENCE_TOKEN}"}


def project_server_request(*, project: Project, base_model: str) -> tuple[ProjectServer, bool]:
    """(the project's server for `base_model`, whether this call started it). Marks it used now; starts it when it
    is stopped, failed, or its worker is gone. Callers check membership and role first."""
    now = timezone.now()
    with transaction.atomic():
        server, _ = ProjectServer.objects.select_for_update().get_or_create(project=project, base_model=base_model)
        problem = project_server_problem(server, now=now)
        if server.status in (Status.STARTING, Status.READY) and problem is None:
            server.last_used_at = now
            server.save(update_fields=["last_used_at"])
            return server, False
        servers_admit(project=project, base_model=base_model)  # a new start: CapReached (429) over a cap
        if problem:  # the worker that held it is gone: this start replaces it
            server.stop_reason = problem[:300]
        server.status, server.worker, server.base_url, server.error = Status.STARTING, "", "", ""
        server.kind = settings.STUDIO_SERVE_SERVER
        server.requested_at = server.last_used_at = now
        server.heartbeat_at = server.ready_at = server.startup_s = server.stopped_at = None
        server.starts += 1
        server.save()
        server_id = server.pk
        transaction.on_commit(lambda: work_enqueue(name=SERVER_HOLD, object_id=server_id))
    return server, True


def project_server_touch(*, server_id: int) -> None:
    """Marks the server used now (it stays up STUDIO_SERVE_IDLE_S after its last use)."""
    ProjectServer.objects.filter(pk=server_id).update(last_used_at=timezone.now())


def project_server_wait(*, server_id: int, beat: Callable[[], None] | None = None,
                        poll_s: float = 0.2) -> ProjectServer | str:
    """Waits (on a worker) for the server to be ready; returns it, or why it will not be. Marks it used while
    waiting, so a slow start is not taken for idleness; `beat` is called each poll (the waiter's own heartbeat)."""
    deadline = time.monotonic() + settings.STUDIO_SERVE_START_TIMEOUT_S + settings.STUDIO_STALE_AFTER_S
    while time.monotonic() < deadline:
        server = ProjectServer.objects.get(pk=server_id)
        if server.status == Status.READY and project_server_problem(server) is None:
            project_server_touch(server_id=server.pk)
            return server
        if server.status in (Status.FAILED, Status.STOPPED):
            return f"the inference server did not start: {server.error or server.stop_reason or server.status}"
        if problem := project_server_problem(server):
            return f"the inference server did not start: {problem}"
        if beat is not None:
            beat()
        project_server_touch(server_id=server.pk)
        time.sleep(poll_s)
    return "the inference server was not ready in time (STUDIO_SERVE_START_TIMEOUT_S)"


def project_server_stop(*, server: ProjectServer, reason: str) -> None:
    """Asks the worker holding the server to stop it (it sees the status change within a second)."""
    ProjectServer.objects.filter(pk=server.pk, status__in=(Status.STARTING, Status.READY)).update(
        status=Status.STOPPED, stop_reason=reason[:300], stopped_at=timezone.now())


def serving_adapters_load(*, server: ProjectServer, checkpoints: list[Checkpoint], timeout_s: float = 120.0) -> None:
    """Loads each checkpoint into the ready server under served_adapter_name (unless it is listed already),
    unloading the least recently used beyond the cap first. Synchronous: Try it's worker calls it; the endpoint
    does the same asynchronously (external_checkpoints.checkpoint_served)."""
    scope = f"project-server:{server.pk}"
    with httpx.Client(timeout=timeout_s, headers=server_headers()) as http:
        for checkpoint in checkpoints:
            name = served_adapter_name(checkpoint)
            for old in checkpoint_used(scope=scope, base_url=server.base_url, name=name, current=SERVED_BASE):
                try:
                    http.post(f"{server.base_url}/unload_lora_adapter", json={"lora_name": old})
                except httpx.HTTPError:
                    pass  # gone with a restarted server: nothing to free
            listed = http.get(f"{server.base_url}/models")
            listed.raise_for_status()
            if name in {m.get("id") for m in listed.json().get("data") or []}:
                continue
            response = http.post(f"{server.base_url}/load_lora_adapter",
                                 json={"lora_name": name, "lora_path": checkpoint.path})
            if response.status_code != 200:
                raise ValueError(f"the inference server could not load checkpoint {checkpoint.adapter_name}: "
                                 f"{response.text[:500]}")
