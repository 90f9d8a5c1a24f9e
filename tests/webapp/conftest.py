from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from studio.key_policy import parse_key_policy
from tests.judge_double import judge_double  # noqa: F401  (fixture)
from tests.ports import wait_for  # noqa: F401  (the one readiness wait, imported from here by many tests)

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED_ENGINE = "tests.webapp.scripted_engine:train"


@pytest.fixture
def scripted_engine(settings):
    settings.STUDIO_ENGINE = SCRIPTED_ENGINE
    return SCRIPTED_ENGINE


@pytest.fixture
def inprocess_executor(settings):
    """The embedded executor and channel layer, on the test database."""
    from channels.layers import channel_layers

    settings.STUDIO_EXECUTOR = "inprocess"
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "webapp.live.layers.ThreadSafeInMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield
    from webapp.execution.executors import wait_idle

    wait_idle(timeout=120)
    channel_layers.backends.clear()


def _worker_env(engine: str | None) -> dict[str, str]:
    from django.db import connection

    db = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "tests.webapp.settings"
    env["PYTHONPATH"] = str(ROOT)
    if engine:
        env["STUDIO_ENGINE"] = engine
    return env


@pytest.fixture
def start_celery_worker(transactional_db):
    """Starts a real Celery worker (subprocess) consuming queue `gpu` from Redis, on the test database;
    `engine` picks the engine its runs use. Stopped (or found killed) at the end of the test."""
    procs: list[subprocess.Popen] = []

    def start(engine: str | None = None, queue: str = "gpu") -> subprocess.Popen:
        redis.Redis.from_url(settings.REDIS_URL).delete(queue)  # stale messages of an earlier test
        log_path = Path(settings.VAR_DIR) / f"celery-worker-{len(procs)}.log"
        log = open(log_path, "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "webapp.celery_app", "worker", "-Q", queue, "--concurrency", "1",
             "--prefetch-multiplier", "1", "-n", f"test-{queue}-{os.getpid()}-{len(procs)}@%h", "--loglevel", "INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=_worker_env(engine), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a test can kill the worker with its pool and engine
        )
        proc.log_path = log_path  # type: ignore[attr-defined]
        procs.append(proc)
        deadline = time.monotonic() + 60
        while "ready." not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the Celery worker did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the worker left behind (pool child, engine)
        except ProcessLookupError:
            pass


def run_story(run) -> str:
    """A run's state for a failed wait: its row, its last events, the engine's log, the logs of the Celery
    workers the test started, and every other process on this machine that talks to the test database."""
    from django.db import connection

    from webapp.models import Run

    row = Run.objects.filter(pk=run.pk).values("status", "phase", "worker", "error", "heartbeat_at",
                                               "attempts", "enqueued_at").first()
    events = list(run.events.order_by("-seq").values_list("seq", "kind")[:8])
    parts = [f"run {run.pk}: {row}", f"last events: {events}"]
    engine_log = Path(run.output_dir) / "engine.log"
    if engine_log.exists():
        parts.append("engine.log:\n" + engine_log.read_text(errors="replace")[-2000:])
    for log_path in sorted(Path(settings.VAR_DIR).glob("celery-worker-*.log")):
        parts.append(f"{log_path.name}:\n" + log_path.read_text(errors="replace")[-2000:])
    name, others = connection.settings_dict["NAME"], []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if name.encode() in (entry / "environ").read_bytes():
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
                    others.append(f"{entry.name}: {command!r}")
            except OSError:
                continue
    parts.append("processes with this test database in their environment:\n" + "\n".join(others))
    return "\n".join(parts)


@pytest.fixture
def tiny_run(tiny_model_dir):
    """Launches a real run on the tiny model playing 2048 (the demo's task, small settings), sampled by the
    in-process server unless `server` names another (a test about the server passes {"kind": "local"}). The
    server is the deployment's (STUDIO_RUN_WORKER_CONFIG, webapp/run_policy.py), so it is set there for the
    launch, which freezes it into the run."""
    from training.fixtures.demo import demo_config

    from tests.webapp.factories import TEST_TINY_MODEL, project_factory
    from webapp.models import Agent, Scenario, ScenarioSet
    from django.conf import settings
    from django.test import override_settings

    from webapp.services.run_config import deep_merge
    from webapp.services.runs import run_launch

    def launch(*, steps: int = 2, project=None, judge_config=None, rubric_version=None, overrides=None,
               server=None, trackers=None):
        demo = demo_config(out_dir="unused", steps=steps, model_dir=tiny_model_dir)
        project = project or project_factory()
        agent = Agent.objects.create(project=project, name="tiny 2048 player", base_model=TEST_TINY_MODEL,
                                     system_prompt=demo.system_prompt, environment_kind=demo.environment.kind,
                                     environment_options=demo.environment.options, max_tokens=16)
        scenario_set = ScenarioSet.objects.create(project=project, name="2048 games")
        Scenario.objects.bulk_create(Scenario(scenario_set=scenario_set, external_id=s.id, user_message=s.user_message,
                                              metadata=s.metadata) for s in demo.scenarios[:4])
        worker = deep_merge(settings.STUDIO_RUN_WORKER_CONFIG, {"server": server or {"kind": "inprocess"}})
        with override_settings(STUDIO_RUN_WORKER_CONFIG=worker):
            return run_launch(user=project.owner, project=project, name="tiny", agent=agent,
                              scenario_set=scenario_set, judge_config=judge_config, rubric_version=rubric_version,
                              steps=steps, group_size=4, groups_per_step=2, learning_rate=demo.grpo.learning_rate,
                              overrides={"lora": demo.lora.model_dump(), **(overrides or {})}, trackers=trackers)

    return launch


@pytest.fixture(autouse=True)
async def _close_async_helper_connections():
    """sync_to_async runs ORM calls on one shared thread; its connection must not outlive the test (else the
    test database cannot be dropped at the end)."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    await sync_to_async(connections.close_all)()


@pytest.fixture(autouse=True)
def _double_key_allowed(request, settings, monkeypatch):
    """The administrators' policy binds the double's key variable to the double (studio/key_policy.py), here
    and in a Celery worker started by the test (from the environment)."""
    if "judge_double" in request.fixturenames:
        policy = {"JUDGE_DOUBLE_API_KEY": [request.getfixturevalue("judge_double").api_base]}
        monkeypatch.setenv("STUDIO_JUDGE_KEY_ENDPOINTS", json.dumps(policy))
        settings.STUDIO_JUDGE_KEY_ENDPOINTS = parse_key_policy(json.dumps(policy))


_MATRIX_CASES: list[tuple[str, str, str]] = []


@pytest.fixture
def matrix_cases() -> list[tuple[str, str, str]]:
    """The authorisation matrix's (URL, role, method) cases, counted in the run's summary."""
    return _MATRIX_CASES


_FAULT_TABLE: list[dict] = []


@pytest.fixture
def fault_table() -> list[dict]:
    """Rows of the fault-injection table (tests/webapp/test_faults.py), printed in the run's summary."""
    return _FAULT_TABLE


def pytest_terminal_summary(terminalreporter) -> None:
    if _FAULT_TABLE:
        columns = list(_FAULT_TABLE[0])
        widths = [max(len(c), *(len(str(row[c])) for row in _FAULT_TABLE)) for c in columns]
        terminalreporter.write_sep("-", "fault injection: fault x moment -> state")
        terminalreporter.write_line(" | ".join(c.ljust(w) for c, w in zip(columns, widths)))
        for row in _FAULT_TABLE:
            terminalreporter.write_line(" | ".join(str(row[c]).ljust(w) for c, w in zip(columns, widths)))
    if _MATRIX_CASES:
        urls = len({name for name, _, _ in _MATRIX_CASES})
        terminalreporter.write_line(f"authorisation matrix: {len(set(_MATRIX_CASES))} (URL, role, method) cases "
                                    f"over {urls} URLs and websockets")

