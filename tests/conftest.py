"""Fixtures every test package shares (tests/training, tests/judging, tests/webapp, …)."""
from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path

import pytest

from tests.built_models import tiny_model


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


CHROMIUM = "/usr/bin/chromium"  # Debian's, driven by Playwright (never a browser download)


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
                    ("server", "tests.webapp.test_browser"): "daphne"}
GROUP_BY_MODULE = {"test_faults.py": "celery", "test_distributed.py": "torchrun", "test_pipeline.py": "timing",
                   "test_external.py": "timing", "test_external_rollouts_e2e.py": "timing",
                   "test_live_pacing.py": "timing"}


def _fixture_group(item: pytest.Item) -> str | None:
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for (name, module), group in GROUP_BY_FIXTURE.items():
        if any(d.func.__module__ == module for d in definitions.get(name, ())):
            return group
    return None


@functools.cache
def _launches_chromium(module) -> bool:
    return "chromium.launch(" in inspect.getsource(module)


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
