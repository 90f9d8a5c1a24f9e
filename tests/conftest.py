"""Fixtures every test package shares (tests/training, tests/judging, tests/webapp, …)."""
from __future__ import annotations

import functools
import inspect
import os
import sys
from pathlib import Path

import pytest

from tests.built_models import tiny_model
from tests.webapp.browser import CHROMIUM

try:  # the engine's own Python 3.12 environment (make test-engine-py312) has no Hypothesis
    from hypothesis import settings as hypothesis_settings
except ImportError:
    hypothesis_settings = None
if hypothesis_settings is not None:
    # Property tests (Hypothesis) draw the same examples on every run, so the suite answers the same on the same
    # code (a seed derived from each test, no example database carried between runs). HYPOTHESIS_PROFILE=fresh draws
    # new ones; a failure found so becomes an @example(...) on the test. The API fuzzer's seeds: test_api_contract.
    hypothesis_settings.register_profile("fixed", derandomize=True, database=None)
    hypothesis_settings.register_profile("fresh", derandomize=False)
    hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny offline model, built once per recipe and shared by every test package (tests/built_models.py)."""
    return tiny_model()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist the workers share the cores: each worker's torch (and the servers and runs it starts)
    gets its share of them, not every core. Two workers of two threads each on two cores made torch's OpenMP
    threads wait on each other: tests/training's engine tests took 144 s at two threads, 91 s at one. A value
    set by whoever runs the suite is kept."""
    if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
        share = str(max(1, (os.cpu_count() or 1) // int(workers)))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, share)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A browser test (`@pytest.mark.browser`) needs Debian's chromium. Without it the test skips with the reason,
    except under CI (the CI variable set), where `make test` has installed it: there its absence is a broken
    install, and the test fails."""
    if item.get_closest_marker("browser") and not Path(CHROMIUM).exists():
        message = f"needs Debian's chromium at {CHROMIUM} (make system-deps)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; on CI its absence is a broken install, not a skip", pytrace=False)
        pytest.skip(message)
    if ungrouped := item.config.stash.get(UNGROUPED, ""):
        pytest.fail(ungrouped, pytrace=False)


# Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`), the tests of one group run one after another on
# one worker: each Celery test starts workers and kills processes, each browser test drives Chromium against a
# daphne, a torchrun test takes both cores, and a timing-sensitive test must not share the machine with another
# of its kind. The other tests are spread over the workers. Each worker has its own test database (pytest-django),
# Redis database, folder and channel prefix (tests/webapp/settings.py), so no two workers share a queue or a run.
# A fixture counts by where it is defined: tests/training has fixtures named `server` too (inference servers).
GROUP_BY_FIXTURE = {("start_celery_worker", "tests.webapp.conftest"): "celery",
                    ("server", "tests.webapp.test_browser"): "daphne",
                    ("app_server", "tests.conftest"): "daphne",
                    ("scripted_app_server", "tests.conftest"): "daphne"}
GROUP_BY_MODULE = {"test_faults.py": "celery", "test_distributed.py": "torchrun", "test_pipeline.py": "timing",
                   "test_external.py": "timing", "test_external_rollouts_e2e.py": "timing",
                   "test_live_pacing.py": "timing"}


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and, before it drops it, who else still holds it: a session left open makes
    the drop fail ("database … is being accessed by other users", issue 44), and the warning alone names no one."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pid, client_port, state, backend_start, left(query, 300) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        others = cursor.fetchall()
    if others:
        import warnings

        import psutil

        owners = {c.laddr.port: p.pid for p in psutil.process_iter() for c in _connections(p)}
        warnings.warn("sessions still open on the test database before its drop: " + "; ".join(
            f"backend {pid} (client port {port}, process {owners.get(port, '?')}"
            f"{' = this one' if owners.get(port) == os.getpid() else ''}, {state}, since {started:%H:%M:%S}): {query!r}"
            for pid, port, state, started, query in others), stacklevel=1)


def _connections(process) -> list:
    try:
        return process.net_connections(kind="tcp")
    except Exception:  # noqa: BLE001 - a process gone or not ours to read: it holds nothing we can name
        return []


@pytest.fixture(scope="session")
def app_world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """This worker's served app (tests/webapp/world.py), one for tests/webapp and tests/security alike."""
    request.getfixturevalue("django_db_setup")  # the test database daphne serves
    from tests.webapp.world import close_world, open_world

    yield open_world(tmp_path_factory.mktemp("app-world"))
    close_world()


@pytest.fixture
def app_server(app_world, transactional_db):
    """The app served by daphne on the test database, the embedded executor running launched runs in daphne."""
    from tests.webapp.world import serve

    yield from serve(app_world, None)


@pytest.fixture
def scripted_app_server(app_world, transactional_db):
    """As `app_server`, with runs launched through it on the scripted engine (no model: pages, not training)."""
    from tests.webapp.world import SCRIPTED_ENGINE, serve

    yield from serve(app_world, SCRIPTED_ENGINE)


@pytest.fixture(autouse=True)
def _served_app_parked(request: pytest.FixtureRequest) -> None:
    """This worker's served app (tests/webapp/world.py) stops before a test that does not use it: its reaper
    would mark that test's `running` runs crashed. Nothing is imported where no test served the app."""
    if (world := sys.modules.get("tests.webapp.world")) is not None:
        world.park_unless_used(request)


def _fixture_group(item: pytest.Item) -> str | None:
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for (name, module), group in GROUP_BY_FIXTURE.items():
        if any(d.func.__module__ == module for d in definitions.get(name, ())):
            return group
    return None


@functools.cache
def _launches_chromium(module) -> bool:
    source = inspect.getsource(module)  # tests/webapp/browser.py's launcher, or a launch of its own
    return "launch_chromium(" in source or "chromium.launch(" in source


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and not item.get_closest_marker("browser") and _launches_chromium(module):
            item.add_marker(pytest.mark.browser)  # a browser test that forgot its marker still fails on CI
        if item.get_closest_marker("xdist_group"):
            continue  # a test that names its own group keeps it
        group = GROUP_BY_MODULE.get(item.path.name) or ("daphne" if item.get_closest_marker("browser") else None)
        group = group or _fixture_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


UNGROUPED = pytest.StashKey[str]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """After every collection hook, pytest-xdist's included: under `--dist loadgroup` it keeps a group on one worker
    by adding `@<group>` to each of its tests' ids. A pytest it cannot do that with (9.2 with xdist 3.8) spreads
    every group over the workers without a word, and Celery, browser and torchrun tests then overlap: every test
    fails instead, saying so."""
    config = session.config
    if not config.getoption("loadgroup", False):
        return
    lost = [item.nodeid for item in session.items
            if (mark := item.get_closest_marker("xdist_group")) and not item.nodeid.endswith(f"@{mark.args[0]}")]
    if lost:
        config.stash[UNGROUPED] = (f"--dist loadgroup did not group {len(lost)} tests (e.g. {lost[0]}): this pytest "
                                   "and pytest-xdist do not work together (requirements.lock says which do)")
