"""docker/compose.yml as Compose itself reads it (`config`, no engine needed): the GPU profile reserves real
devices and pins each worker, checkpoints sit on one volume for all, Redis keeps its queue on disk, and every service has a health check that
what depends on it waits for."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

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


def _words(command) -> list[str]:
    return command.split() if isinstance(command, str) else list(command or [])


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_every_service_has_a_health_check_and_starts_after_what_it_needs_is_healthy(profile):
    config = _config(profile)
    services = {name: service for name, service in config["services"].items()
                if profile in service.get("profiles", [profile])}
    for name, service in services.items():
        test = " ".join(_words(service.get("healthcheck", {}).get("test"))).replace("$$", "$")
        assert test and test != "NONE", f"{name} has no health check"
        for other, how in service.get("depends_on", {}).items():
            assert how["condition"] == "service_healthy", f"{name} starts before {other} is healthy"
        words = _words(service.get("command"))
        if "worker" in words:  # a worker answers a ping by the node name it starts with
            node = words[words.index("-n") + 1]
            assert f"inspect ping -d {node.replace('%h', '$HOSTNAME')} " in test, (name, test)
    assert "/readyz" in " ".join(_words(services["web"]["healthcheck"]["test"]))
    assert services["web"]["depends_on"].keys() == {"db", "redis"}
    assert "webapp.operations.probe beat" in " ".join(_words(services["beat"]["healthcheck"]["test"]))
    # make compose-check runs the same rules over the resolved file
    resolved = subprocess.run([sys.executable, "docker/compose_health.py", profile], cwd=ROOT, capture_output=True,
                              text=True, input=yaml.safe_dump(config), timeout=60)
    assert resolved.returncode == 0, resolved.stderr


def test_compose_check_names_a_service_without_a_health_check_or_that_starts_too_early():
    config = {"services": {"db": {"image": "postgres:16"},
                           "web": {"healthcheck": {"test": ["CMD", "true"]},
                                   "depends_on": {"db": {"condition": "service_started"}}}}}
    result = subprocess.run([sys.executable, "docker/compose_health.py", "cpu"], cwd=ROOT, capture_output=True,
                            text=True, input=yaml.safe_dump(config), timeout=60)
    assert result.returncode == 1
    assert "db: no health check" in result.stderr
    assert "web: starts before db is healthy" in result.stderr
