"""/healthz and /readyz as a probe reads them: no login, JSON naming each check, 503 naming what is down, and no
address or password in the answer."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.ports import free_port
from tests.webapp.conftest import ROOT
from webapp.operations import heartbeats

pytestmark = pytest.mark.django_db


def test_healthz_answers_while_the_process_runs_without_asking_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_is_ready_when_the_database_redis_the_channel_layer_and_a_worker_answer(client):
    heartbeats.worker_beat(worker="gpu@host-a", queues=["gpu"])
    heartbeats.worker_beat(worker="judge@host-b", queues=["judge"])

    response = client.get("/readyz")

    body = response.json()
    assert response.status_code == 200, body
    assert body["ready"] is True and body["down"] == []
    assert set(body["checks"]) == {"database", "redis", "channel_layer", "workers"}
    assert all(check["ok"] and check["used"] for check in body["checks"].values())
    assert "PostgreSQL answered" in body["checks"]["database"]["detail"]
    workers = body["checks"]["workers"]["detail"]
    assert "2 worker(s) heard from" in workers and "gpu 1" in workers and "no worker on serve" in workers
    assert "host-a" not in response.content.decode()  # worker names are host names: not for anonymous readers


def test_readyz_names_a_stopped_redis_and_answers_503_without_its_address(client, settings):
    closed = free_port()
    settings.REDIS_URL = f"redis://:hunter2-secret@127.0.0.1:{closed}/1"

    response = client.get("/readyz")

    body = response.json()
    assert response.status_code == 503
    assert body["ready"] is False
    # the workers' heartbeats live in Redis too, so nobody can tell they are alive
    assert body["down"] == ["redis", "workers"]
    assert body["checks"]["redis"]["detail"].startswith("Redis does not answer (")
    assert body["checks"]["database"]["ok"] and body["checks"]["channel_layer"]["ok"]
    text = response.content.decode()
    assert str(closed) not in text and "hunter2" not in text and "127.0.0.1" not in text


def test_readyz_answers_503_when_no_worker_was_heard_from_recently(client):
    heartbeats.worker_beat(worker="gpu@host-a", queues=["gpu"])
    heartbeats.worker_gone(worker="gpu@host-a")

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["down"] == ["workers"]
    assert "no Celery worker heard from" in response.json()["checks"]["workers"]["detail"]


def test_readyz_on_the_embedded_default_says_redis_and_workers_are_not_used(client, settings):
    settings.REDIS_URL = None
    settings.STUDIO_EXECUTOR = "inprocess"
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "webapp.live.layers.ThreadSafeInMemoryChannelLayer"}}

    response = client.get("/readyz")

    checks = response.json()["checks"]
    assert response.status_code == 200
    assert checks["redis"] == {"ok": True, "used": False, "detail": checks["redis"]["detail"]}
    assert "not used" in checks["redis"]["detail"] and "not used" in checks["workers"]["detail"]
    assert checks["workers"]["used"] is False
    assert checks["channel_layer"]["ok"] and "in-memory" in checks["channel_layer"]["detail"]


PROBE = """
import json
import django
django.setup()
from django.test import Client
client = Client()  # Host: testserver, which ALLOWED_HOSTS does not list: a probe by container address
print(json.dumps({"healthz": client.get("/healthz").status_code,
                  "readyz": client.get("/readyz").status_code,
                  "body": client.get("/readyz").content.decode()}))
"""


def test_a_web_process_whose_database_and_redis_are_down_is_alive_but_not_ready():
    db_port, redis_port = free_port(), free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "ALLOWED_HOSTS": "studio.example.com",
           "DATABASE_URL": f"postgres://studio:db-secret@127.0.0.1:{db_port}/studio",
           "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "SECRET_KEY": "s" * 40, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    body = json.loads(answer["body"])
    assert answer["healthz"] == 200 and answer["readyz"] == 503
    assert body["down"] == ["database", "redis", "channel_layer", "workers"]
    assert body["checks"]["database"]["detail"].startswith("PostgreSQL does not answer (")
    assert "db-secret" not in answer["body"] and str(db_port) not in answer["body"]
    assert str(redis_port) not in answer["body"]
