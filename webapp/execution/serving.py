"""Holds a project's inference server on a worker (issue 37): starts it as a child process (the server kind a run
uses, training.servers.start_server), says on its row when it is ready and how long the start took, beats the
heartbeat, and stops it after STUDIO_SERVE_IDLE_S without use, when its row is stopped, or when it dies.

An entry point like the run executor: the Celery task `project_server_hold_task` (queue `serve`; one task per
running server) or the embedded executor's `serve` pool, through dispatch.py.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from training.config import ChatConfig, ServerConfig
from training.rl.external import WILDCARDS

from webapp.execution.runner import APP_SECRETS
from webapp.execution.stopping import process_stopping
from webapp.models import Checkpoint, ProjectServer, Run
from webapp.services.serving import SERVED_BASE
from webapp.storable import storable

log = logging.getLogger(__name__)
Status = ProjectServer.Status


def serving_env() -> dict[str, str]:
    """The server's environment: none of the web app's secrets or API keys, the deployment's inference token."""
    env = {k: v for k, v in os.environ.items() if k not in APP_SECRETS and not k.endswith("_API_KEY")}
    threads = str(settings.STUDIO_ENGINE_THREADS)
    env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1", "STUDIO_INFERENCE_TOKEN": settings.STUDIO_INFERENCE_TOKEN})
    return env


def _max_lora_rank(server: ProjectServer) -> int:
    """The largest adapter rank among the project's runs on this base model (the server refuses larger ones)."""
    ranks = [int(((config or {}).get("lora") or {}).get("r") or 8) for config in
             Run.objects.filter(project_id=server.project_id).values_list("config", flat=True)
             if (config or {}).get("base_model") == server.base_model]
    return max(ranks, default=8)


def _chat(server: ProjectServer) -> ChatConfig:
    """The frozen chat family and reasoning setting of the run whose checkpoint on this base model was asked for
    last (Try it and the endpoints mark a checkpoint served before asking for the server), else of the project's
    latest run on it: its adapter was trained on prompts rendered so (Qwen3 with reasoning dropped samples after an
    empty think block). A server holds the setting it was started with until it stops (after STUDIO_SERVE_IDLE_S)."""
    served = Checkpoint.objects.filter(run__project_id=server.project_id, run__config__base_model=server.base_model,
                                       served_at__isnull=False).order_by("-served_at", "-pk")
    latest = Run.objects.filter(project_id=server.project_id, config__base_model=server.base_model).order_by("-pk")
    found = list(served.values_list("run__config__chat", flat=True)[:1]) or \
        list(latest.values_list("config__chat", flat=True)[:1])
    try:
        return ChatConfig.model_validate(found[0] or {}) if found else ChatConfig()
    except ValueError:  # a family this version no longer knows: the template's fingerprint decides
        return ChatConfig()


def _reachable(base_url: str) -> str:
    url = urlsplit(base_url)
    if url.hostname in WILDCARDS:  # listening everywhere: reached by this machine's name
        url = url._replace(netloc=f"{socket.gethostname()}:{url.port}")
    return urlunsplit(url)


class _Heartbeat:
    """Beats the row's heartbeat from a thread while the server starts (a model load may take minutes)."""

    def __init__(self, server_id: int) -> None:
        self.server_id, self.stop = server_id, threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name=f"server-{server_id}-heartbeat")

    def _beat(self) -> None:
        try:
            while not self.stop.wait(settings.STUDIO_HEARTBEAT_S):
                try:
                    ProjectServer.objects.filter(pk=self.server_id).update(heartbeat_at=timezone.now())
                except Exception:  # a database blip: beat again next time
                    log.warning("server %s: heartbeat not recorded", self.server_id, exc_info=True)
                    connection.close()
        finally:
            connection.close()

    def __enter__(self) -> "_Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def project_server_hold(*, server_id: int, worker: str) -> str:
    """Runs the server until it idles or is stopped; returns how it ended (skipped: another worker has it)."""
    from training.servers import start_server

    now = timezone.now()
    if not ProjectServer.objects.filter(pk=server_id, status=Status.STARTING, worker="").update(
            worker=worker, heartbeat_at=now):
        return "skipped"  # a redelivered message, or a start that was replaced meanwhile
    row = ProjectServer.objects.get(pk=server_id)
    log_path = Path(settings.VAR_DIR) / "servers" / f"project-{row.project_id}-server-{row.pk}.log"
    config = ServerConfig(kind=row.kind or settings.STUDIO_SERVE_SERVER, host=settings.STUDIO_ENGINE_HOST or "127.0.0.1",
                          max_lora_rank=_max_lora_rank(row), startup_timeout_s=settings.STUDIO_SERVE_START_TIMEOUT_S)
    try:
        with _Heartbeat(server_id):
            server = start_server(config, row.base_model, log_path, served_name=SERVED_BASE, env=serving_env(),
                                  device="cuda" if settings.STUDIO_GPU_WORKER else "cpu",
                                  threads=settings.STUDIO_ENGINE_THREADS, chat=_chat(row))
    except Exception as err:  # noqa: BLE001 - shown where the server was asked for, never dropped
        log.warning("project server %s did not start: %s", server_id, err)
        ProjectServer.objects.filter(pk=server_id, worker=worker).update(
            status=Status.FAILED, error=storable(f"{type(err).__name__}: {err}")[:5000], stopped_at=timezone.now())
        return Status.FAILED
    try:
        ready = timezone.now()
        started = ProjectServer.objects.filter(pk=server_id, worker=worker, status=Status.STARTING).update(
            status=Status.READY, base_url=_reachable(server.base_url), ready_at=ready, heartbeat_at=ready,
            startup_s=(ready - (row.requested_at or now)).total_seconds())
        return _hold(server_id, worker, server) if started else "stopped"
    finally:
        server.stop()


def _hold(server_id: int, worker: str, server: object) -> str:
    poll = min(1.0, settings.STUDIO_SERVE_IDLE_S / 4, settings.STUDIO_HEARTBEAT_S)
    last_beat = 0.0
    while True:
        time.sleep(poll)
        try:
            row = ProjectServer.objects.filter(pk=server_id).values("status", "worker", "last_used_at",
                                                                    "ready_at").first()
        except Exception:  # a database blip: the heartbeat stops meanwhile, and a long one makes the row stale
            log.warning("server %s: could not read its row", server_id, exc_info=True)
            close_old_connections()
            continue
        if row is None or row["worker"] != worker or row["status"] != Status.READY:
            return "stopped"  # stopped by someone, or replaced by another start
        now = timezone.now()
        if process_stopping():  # the server process holding it in-process is exiting: the caller stops it now
            ProjectServer.objects.filter(pk=server_id, worker=worker, status=Status.READY).update(
                status=Status.STOPPED, stopped_at=now, stop_reason="the web server process stopped")
            return Status.STOPPED
        process = getattr(server, "process", None)
        if process is not None and process.poll() is not None:
            ProjectServer.objects.filter(pk=server_id, worker=worker).update(
                status=Status.FAILED, stopped_at=now,
                error=f"the inference server exited with code {process.returncode}; see its log on {worker}")
            return Status.FAILED
        # Idle since its last use or since it became ready, whichever is later: a start longer than the idle time
        # must not end in a stop before the request that asked for it is served.
        idle = (now - max(filter(None, (row["last_used_at"], row["ready_at"])), default=now)).total_seconds()
        if idle >= settings.STUDIO_SERVE_IDLE_S:
            # Only if nobody used it since it was read: a request that came in meanwhile keeps it up.
            if ProjectServer.objects.filter(pk=server_id, worker=worker, status=Status.READY,
                                            last_used_at=row["last_used_at"]).update(
                status=Status.STOPPED, stopped_at=now,
                    stop_reason=f"idle for {idle:.0f} s (STUDIO_SERVE_IDLE_S = {settings.STUDIO_SERVE_IDLE_S:g})"):
                return Status.STOPPED
            continue
        if time.monotonic() - last_beat >= settings.STUDIO_HEARTBEAT_S:
            ProjectServer.objects.filter(pk=server_id, worker=worker).update(heartbeat_at=now)
            last_beat = time.monotonic()
