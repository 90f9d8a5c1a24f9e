"""The managed download: a run whose base model is a Hugging Face id has it fetched into the worker's shared cache
(STUDIO_MODEL_CACHE_DIR) before anything else of the run starts (issue 45).

The worker calls `run_model_fetch` once, after claiming the run and before checking the model and starting the
engine. A model already complete in the cache is taken at once, asking no hub; else `python -m training.model.hub`
downloads it in a process of its own, whose progress becomes the run's phase ("downloading Qwen/Qwen3-8B: 3.1
of 16.4 GB") through `model_download` events, while this loop beats the run's heartbeat and stops the download
when the run is cancelled. A failure (hub unreachable, a token needed, not enough disk) is a named error before
any GPU time. The engine is then started with `model_engine_env`: the same cache, and the hub's offline switch
on, so it loads the fetched files and never downloads anything itself.

The download process gets the worker's environment without the web app's secrets and without the offline switch
(HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE: a deployment that sets them keeps its engines offline and still has its
models fetched here; STUDIO_MODEL_DOWNLOAD=off turns the managed download off). HF_TOKEN is the deployment's:
nothing a project member types reaches this process (its arguments are the run's catalogue model and settings).
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from webapp.live.ingest import run_event_ingest
from webapp.model_catalogue import hub_model
from webapp.services.runs import run_control_state, run_heartbeat

log = logging.getLogger(__name__)
POLL_S = 0.25
EVENT_EVERY_S = 1.0  # at most one progress event a second: each is a stored RunEvent and a message to every page
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
APP_SECRETS = ("SECRET_KEY", "STUDIO_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL")


@dataclass(frozen=True)
class ModelFetch:
    """What the fetch left: `snapshot`, the fetched model's directory (None: the run names no hub model);
    `error`, why the run cannot start; `cancelled`, the run was cancelled while its model downloaded."""

    snapshot: Path | None = None
    error: str = ""
    cancelled: bool = False


def model_engine_env(env: dict[str, str], fetched: ModelFetch) -> dict[str, str]:
    """The engine's environment `env` for a fetched model: the shared cache, offline, and without the hub's token,
    which only the download needs (the engine runs code a project configured)."""
    if fetched.snapshot is None:
        return env
    kept = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    return {**kept, "HF_HUB_CACHE": str(settings.STUDIO_MODEL_CACHE_DIR), "HF_HUB_OFFLINE": "1"}


def run_model_fetch(*, run_id: int, worker: str, config: dict[str, Any]) -> ModelFetch:
    from training.model.hub import cached_snapshot

    repo_id = hub_model(config)
    if repo_id is None:
        return ModelFetch()
    cache_dir = Path(settings.STUDIO_MODEL_CACHE_DIR)
    if (snapshot := cached_snapshot(repo_id, cache_dir)) is not None:
        _record(run_id, {"state": "cached", "model": repo_id})
        return ModelFetch(snapshot=snapshot)
    return _download(run_id=run_id, worker=worker, repo_id=repo_id, cache_dir=cache_dir)


def _download_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in APP_SECRETS + OFFLINE_SWITCHES}
    env.update({"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1"})
    return env


def _download(*, run_id: int, worker: str, repo_id: str, cache_dir: Path) -> ModelFetch:
    log_path = Path(settings.STUDIO_RUNS_DIR) / "model-downloads.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "training.model.hub", repo_id, "--cache-dir", str(cache_dir),
               "--endpoint", settings.STUDIO_MODEL_HUB]
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                                env=_download_env(), cwd=str(settings.BASE_DIR))
    assert proc.stdout is not None
    outcome: dict[str, Any] = {}
    buffer, last_event, last_beat = b"", 0.0, time.monotonic()
    fd = proc.stdout.fileno()
    try:
        while True:
            if select.select([fd], [], [], POLL_S)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    message = _parse(line)
                    outcome.update({k: message[k] for k in ("path", "error") if k in message})
                    if message.get("kind") in ("listing", "progress"):
                        done, total = int(message.get("done", 0)), int(message.get("total", 0))
                        if message["kind"] == "listing" or done >= total or \
                                time.monotonic() - last_event >= EVENT_EVERY_S:
                            _record(run_id, {"state": "downloading", "model": repo_id, "done": done, "total": total})
                            last_event = time.monotonic()
            now = time.monotonic()
            if now - last_beat >= settings.STUDIO_HEARTBEAT_S:  # a long download must not look like a dead worker
                run_heartbeat(run_id=run_id, worker=worker)
                last_beat = now
            if run_control_state(run_id=run_id, worker=worker) in ("cancel", "lost"):
                _stop(proc)
                return ModelFetch(cancelled=True)
    except BaseException:  # e.g. the database went away: the download must not outlive this worker's attention
        _stop(proc)
        raise
    finally:
        proc.stdout.close()
    code = proc.wait()
    if outcome.get("error"):
        return ModelFetch(error=str(outcome["error"]))
    if code != 0 or not outcome.get("path"):
        return ModelFetch(error=f"could not download {repo_id}: the download exited with code {code} (the "
                                "worker's model-downloads.log in its runs directory says why)")
    _record(run_id, {"state": "downloaded", "model": repo_id})
    return ModelFetch(snapshot=Path(str(outcome["path"])))


def _parse(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except json.JSONDecodeError:
        log.warning("model download: unreadable line %r", line[:200])
        return {}
    return message if isinstance(message, dict) else {}


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _record(run_id: int, event: dict[str, Any]) -> None:
    run_event_ingest(run_id=run_id, event={"kind": "model_download", **event})
