"""The embedded default (no DATABASE_URL / REDIS_URL): SQLite, in-memory channel layer, in-process executor.
And settings that refuse bad environment values at start."""
from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys

import pytest

from tests.webapp.conftest import ROOT


def _env(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "STUDIO_CHANNEL_PREFIX", "STUDIO_HEARTBEAT_S",
                        "STUDIO_STALE_AFTER_S", "DJANGO_SETTINGS_MODULE")}
    env.update({"STUDIO_VAR_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), **extra})
    return env


def _manage(tmp_path, *args: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=timeout)


def test_the_demo_command_trains_the_tiny_model_end_to_end_on_the_embedded_default(tmp_path, tiny_model_dir):
    result = _manage(tmp_path, "studio_demo", "--steps", "1", "--model-dir", str(tiny_model_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "user:     demo" in result.stdout and "password: " in result.stdout
    assert "/runs/1/" in result.stdout and "verifiable reward" in result.stdout
    db = sqlite3.connect(tmp_path / "studio.sqlite3")
    assert db.execute("select status, steps_done from webapp_run").fetchall() == [("completed", 1)]
    kinds = {k for (k,) in db.execute("select kind from webapp_runevent")}
    assert {"run_started", "group_scored", "step_finished", "checkpoint_saved", "run_finished"} <= kinds
    assert "evaluation" in kinds  # the demo holds out 24 positions; the last step is always evaluated
    assert db.execute("select count(*) from webapp_trajectory").fetchone()[0] == 32  # 4 groups of 8


def test_the_demo_with_a_judge_that_does_not_answer_stops_with_a_sentence_and_queues_nothing(tmp_path,
                                                                                            tiny_model_dir):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = _manage(tmp_path, "studio_demo", "--steps", "1", "--model-dir", str(tiny_model_dir), timeout=120,
                     JUDGE_MODEL="openai/judge",
                     JUDGE_API_BASE=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY="test")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "the demo run was not launched" in result.stderr and "judge" in result.stderr
    assert sqlite3.connect(tmp_path / "studio.sqlite3").execute("select count(*) from webapp_run").fetchone() == (0,)


@pytest.mark.parametrize("name, value, message", [
    ("DEBUG", "ture", "DEBUG='ture' is not a boolean"),
    ("DATABASE_URL", "mysql://x/y", "scheme must be postgres:// or sqlite://"),
    ("REDIS_URL", "http://localhost", "scheme must be redis://"),
    ("STUDIO_HEARTBEAT_S", "often", "STUDIO_HEARTBEAT_S='often' is not a number"),
    ("STUDIO_EXECUTOR", "gpu", "STUDIO_EXECUTOR='gpu' must be one of celery, inprocess"),
    ("STUDIO_JUDGE_KEY_ENDPOINTS", "OPENAI_API_KEY", "STUDIO_JUDGE_KEY_ENDPOINTS is not JSON"),
])
def test_a_bad_environment_value_stops_the_app_at_start_with_its_name(tmp_path, name, value, message):
    result = _manage(tmp_path, "check", timeout=60, **{name: value, "SECRET_KEY": "k" * 40})
    assert result.returncode != 0 and message in result.stderr


def test_a_server_setup_without_a_secret_key_refuses_to_start(tmp_path):
    result = _manage(tmp_path, "check", timeout=60, DATABASE_URL="postgres://postgres@127.0.0.1:5432/x")
    assert result.returncode != 0 and "SECRET_KEY is required" in result.stderr
