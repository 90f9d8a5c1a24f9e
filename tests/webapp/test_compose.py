"""docker/compose.yml as Compose itself reads it (`config`, no engine needed): the GPU profile reserves real
devices and pins each worker, checkpoints sit on one volume for all, and Redis keeps its queue on disk."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from tests.webapp.conftest import ROOT


def _compose() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def _config(profile: str) -> dict:
    compose = _compose()
    if compose is None:
        message = "neither the docker compose plugin nor docker-compose is installed (make system-deps)"
        if os.environ.get("CI"):  # `make test` installs it: on CI its absence is a broken install, not a skip
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run([*compose, "-f", "docker/compose.yml", "--profile", profile, "config"], cwd=ROOT,
                            env={**os.environ, "SECRET_KEY": "k" * 40}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_the_gpu_profile_reserves_a_gpu_per_worker_pins_it_and_shares_the_checkpoints():
    services = _config("gpu")["services"]
    worker = services["gpu-worker-0"]
    assert worker["build"]["dockerfile"] == "docker/Dockerfile.gpu"
    device = worker["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["capabilities"] == ["gpu"] and device["device_ids"] == ["0"]
    assert worker["environment"]["CUDA_VISIBLE_DEVICES"] == "0" and worker["environment"]["STUDIO_GPU_WORKER"] == "1"
    assert "-Q gpu" in " ".join(worker["command"] if isinstance(worker["command"], list) else [worker["command"]])
    runs = {v.split(":")[0] for name in ("web", "gpu-worker-0") for v in services[name]["volumes"]
            if isinstance(v, str)} | {v["source"] for name in ("web", "gpu-worker-0") for v in services[name]["volumes"]
                                      if isinstance(v, dict)}
    assert "runs" in runs
    assert services["web"]["environment"]["STUDIO_RUNS_DIR"] == worker["environment"]["STUDIO_RUNS_DIR"]


def test_redis_keeps_the_queue_on_a_volume():
    redis = _config("cpu")["services"]["redis"]
    command = redis["command"] if isinstance(redis["command"], str) else " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert any((v if isinstance(v, str) else f"{v['source']}:{v['target']}").startswith("redis:")
               for v in redis["volumes"])


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_every_queue_the_app_sends_to_has_a_worker_in_each_profile(profile):
    from webapp.execution.dispatch import QUEUES

    # some Compose versions list every profile's services in `config`: the profile's are those it names
    services = {name: service for name, service in _config(profile)["services"].items()
                if profile in service.get("profiles", [profile])}
    consumed: dict[str, list[str]] = {}
    for name, service in services.items():
        command = service.get("command") or []
        words = command.split() if isinstance(command, str) else list(command)
        if "-Q" in words:
            for queue in words[words.index("-Q") + 1].split(","):
                consumed.setdefault(queue, []).append(name)
    assert sorted(set(QUEUES.values()) - set(consumed)) == [], f"queues without a worker ({profile}): {consumed}"
    serve = services[consumed["serve"][0]]
    # the project servers listen where the web and judge containers reach them, by the worker's hostname
    assert serve["environment"]["STUDIO_ENGINE_HOST"] == "0.0.0.0" and serve.get("hostname")
    assert serve["environment"]["STUDIO_SERVE_SERVER"] == ("vllm" if profile == "gpu" else "local")
