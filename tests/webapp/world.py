"""The tests' one world (DESIGN §7): the app served by daphne on the test database, shared by the tests that can
share it, and the one free-port helper and one readiness wait every test that starts a server uses.

- `free_port()`, `wait_listening(...)`, `wait_for(...)`: tests/ports.py's (the one free-port helper and readiness
  wait, free of Django so tests/training uses them too), re-exported here.
- `start_daphne(env, log)` / `stop_daphne(served)`: the web process as docs/webapp.md deploys it, in its own
  process group (so a stop takes the engine children and project servers it started with it).
- `app_server` / `scripted_app_server` (fixtures, defined in tests/conftest.py so that tests/webapp and
  tests/security share one session's world; Django is imported only where a test asks for them): the served app with the embedded executor and channel layer;
  the second runs launches on the scripted engine (pages, not training). One daphne per pytest worker serves a
  stretch of consecutive tests that ask for the same one with the same environment (conftest's xdist group
  `daphne` keeps them together); a test whose environment differs (its judge double's key policy) gets its own.
  It is stopped when a test leaves work in it (an active run, a project server, an engine child: the next test
  must not meet them, and the next test's database flush must not pull rows from under them), when a test
  that does not use it runs (its reaper would mark that test's `running` runs crashed), and at the end.

Every daphne the tests start goes through `start_daphne` (checked for issue 44: no test file has a copy of its own).
The fixtures that serve the app, and why the ones that start their own cannot share this worker's:
- `server` (test_browser.py), `served_app` (serving_world.py), `web` (test_external_rollouts_e2e.py): `app_server`.
- `scripted_server` (test_browser_live_truth.py): `scripted_app_server`.
- `api_server` (test_api_contract.py): its own; the fuzzer needs every limit raised a millionfold and all egress
  refused (STUDIO_THROTTLE_SCALE, STUDIO_EGRESS_DENY_ALL), settings of the process that no other test may have.
- `_daphne` (test_faults.py): its own; the test kills it with -9 mid-override and restarts it on the same port.
- `web` (tests/security/test_endpoint_flood.py): its own; a per-run cap (STUDIO_EXTERNAL_MAX_IN_FLIGHT) and a
  PostgreSQL application_name by which the test counts that process's connections, both settings of the process.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from tests.ports import free_port, listening, listening_ports, wait_for, wait_listening  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]

# What every shared served app runs with: no Redis (the embedded executor and in-memory channel layer, runs
# in daphne's own process), project servers that idle out after 30 s, and API limits no test's client reaches
# (the limits themselves are tested in test_rate_limits.py).
APP_ENV = {"REDIS_URL": "", "STUDIO_EXECUTOR": "inprocess", "STUDIO_SERVE_IDLE_S": "30",
           "STUDIO_API_PER_MINUTE": "100000", "STUDIO_API_ANON_PER_MINUTE": "100000"}
SCRIPTED_ENGINE = "tests.webapp.scripted_engine:train"
PER_TEST_VARIABLES = {"PYTEST_CURRENT_TEST"}  # pytest's own, different in every test and unread by the app


@dataclass
class Served:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_daphne(env: dict[str, str], log: Path, *, port: int = 0) -> Served:
    """daphne on the ASGI app with `env` (start from `_worker_env`: the test database), appending to `log`. With
    no port it binds port 0 itself and the port it got is read back: no window in which a port found free is
    taken by another process before daphne binds it."""
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor; ours closes here
        proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                 "webapp.asgi:application"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    port = wait_listening(port, proc=proc, log=log, what="daphne")
    return Served(proc=proc, port=port, log=log)


def stop_daphne(served: Served, timeout: float = 30) -> None:
    """SIGTERM (daphne ends its sockets and runs), then SIGKILL for the whole group: what it started must not
    outlive it (an engine child or project server left behind writes to the next test's database)."""
    if served.proc.poll() is None:
        served.proc.terminate()
        try:
            served.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(served.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    served.proc.wait()


class AppWorld:
    """This pytest worker's served app, kept between consecutive tests that ask for the same settings."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.served: Served | None = None
        self.key: tuple | None = None
        self.starts = 0

    def serve(self, engine: str | None) -> Served:
        """The served app for a test whose environment (as daphne would inherit it now) is this one; a test that
        set another (a judge double's key policy names its own port) gets a daphne of its own, as before."""
        from tests.webapp.conftest import _worker_env

        env = _worker_env(engine) | APP_ENV | {"RUBRIC_STUDIO_JUDGE_CACHE": str(self.folder / "judge-cache")}
        key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_TEST_VARIABLES))
        if self.served is not None and (self.key != key or self.served.proc.poll() is not None):
            self.stop()
        if self.served is None:
            self.served, self.key = start_daphne(env, self.folder / "daphne.log"), key
            self.starts += 1
        return self.served

    def after_test(self) -> None:
        """Keeps the app for the next test only if this one left nothing running in it. The judge's cache is
        emptied either way: a test's judge double must see every request it is owed."""
        from webapp.models import ProjectServer, Run
        from webapp.models.runs import ACTIVE_STATUSES

        shutil.rmtree(self.folder / "judge-cache", ignore_errors=True)
        if self.served is None:
            return
        servers = ProjectServer.objects.filter(status__in=["starting", "ready"])
        busy = (Run.objects.filter(status__in=ACTIVE_STATUSES).exists() or servers.exists()
                or _children(self.served.proc.pid))
        if busy:
            servers.update(status="stopped", stop_reason="test over")  # as an operator would, before the stop
            self.stop()

    def stop(self) -> None:
        if self.served is not None:
            stop_daphne(self.served)
        self.served = self.key = None


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


_WORLD: AppWorld | None = None


def park_unless_used(request: pytest.FixtureRequest) -> None:
    """Called before every test (tests/conftest.py): a test that uses no served app stops this worker's."""
    if _WORLD is not None and _WORLD.served is not None and not {"app_server", "scripted_app_server"} & set(
            request.fixturenames):
        _WORLD.stop()


def open_world(folder: Path) -> AppWorld:
    global _WORLD
    _WORLD = AppWorld(folder)
    return _WORLD


def close_world() -> None:
    global _WORLD
    if _WORLD is not None:
        _WORLD.stop()
    _WORLD = None


def serve(app_world: AppWorld, engine: str | None):
    """The body of the `app_server` fixtures (tests/conftest.py): the app for this test, settled after it."""
    served = app_world.serve(engine)
    yield served
    app_world.after_test()
