"""Real Celery processes tell the web process they are alive: a worker's presence makes /readyz ready and its
clean stop makes it not; beat's sends keep its health check green; the tasks they ran show in /metrics."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.webapp.conftest import ROOT, _worker_env, wait_for
from tests.webapp.operations.test_metrics import TOKEN, scrape
from webapp.operations import probe

REAPER = ("task", "webapp.tasks.reap_stale_runs_task")


def _probe_beat() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webapp.operations.probe", "beat"], cwd=ROOT, env=_worker_env(None),
                          capture_output=True, text=True, timeout=60)


def test_a_worker_and_beat_report_themselves_and_their_tasks(client, settings, start_celery_worker, tmp_path):
    settings.STUDIO_METRICS_TOKEN = TOKEN
    assert client.get("/readyz").json()["down"] == ["workers"]
    assert probe.beat_problem() == "beat has sent no task yet"

    worker = start_celery_worker(queue="judge")
    log = open(tmp_path / "beat.log", "w")
    beat = subprocess.Popen([sys.executable, "-m", "celery", "-A", "webapp.celery_app", "beat", "--loglevel", "INFO",
                             "-s", str(tmp_path / "beat-schedule")],
                            cwd=ROOT, env=_worker_env(None), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        ready = wait_for(lambda: (r := client.get("/readyz")).status_code == 200 and r.json(), timeout=30,
                         message="/readyz to hear from the worker", explain=lambda: worker.log_path.read_text())
        assert "judge 1" in ready["checks"]["workers"]["detail"]
        # beat sends the reaper (every STUDIO_STALE_AFTER_S / 2), the worker runs it, and both leave their mark
        wait_for(lambda: scrape(client).get(("studio_celery_tasks_total", (("outcome", "success"), REAPER))),
                 timeout=30, message="the reaper's success in /metrics",
                 explain=lambda: Path(tmp_path / "beat.log").read_text() + worker.log_path.read_text())
        assert scrape(client)[("studio_workers_heard", (("queue", "judge"),))] == 1
        checked = _probe_beat()  # the command beat's health check runs
        assert checked.returncode == 0, checked.stderr
    finally:
        os.killpg(beat.pid, signal.SIGTERM)
        beat.wait(timeout=20)

    worker.terminate()  # a clean stop: the worker says it is gone
    worker.wait(timeout=20)
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["down"] == ["workers"]


@pytest.fixture(autouse=True)
def _judge_queue_empty():
    import redis

    yield
    redis.Redis.from_url(settings.REDIS_URL).delete("judge")  # what beat sent after the worker stopped
