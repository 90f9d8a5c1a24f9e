"""The embedded executor's reaper starts with a server process, never on import of webapp.asgi."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.webapp.test_embedded import _env, _manage
from tests.webapp.conftest import ROOT
from webapp.execution.executors import is_server_process

PROBE = ("import sys, threading; sys.argv[0] = {argv0!r}; import webapp.asgi; "
         "print(sorted(t.name for t in threading.enumerate()))")


def _threads_after_import(tmp_path, argv0: str) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv0=argv0)], cwd=ROOT, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_importing_the_asgi_module_starts_no_thread_but_a_server_process_starts_the_reaper(tmp_path):
    assert _manage(tmp_path, "migrate", timeout=120).returncode == 0
    assert "studio-reaper" not in _threads_after_import(tmp_path, "-c")
    assert "studio-reaper" in _threads_after_import(tmp_path, "/usr/lib/python3/site-packages/daphne/__main__.py")


@pytest.mark.parametrize("argv, environ, serving", [
    (["/venv/bin/daphne", "webapp.asgi:application"], {}, True),
    (["/venv/lib/site-packages/uvicorn/__main__.py", "webapp.asgi:application"], {}, True),
    (["manage.py", "runserver"], {"RUN_MAIN": "true"}, True),
    (["manage.py", "runserver", "--noreload"], {}, True),
    (["manage.py", "runserver"], {}, False),  # the autoreloader's parent: its child serves
    (["manage.py", "shell"], {}, False),
    (["/venv/bin/celery", "-A", "webapp.celery_app", "worker"], {}, False),
    (["/venv/bin/pytest"], {}, False),
])
def test_only_a_process_that_serves_the_app_counts_as_a_server(argv, environ, serving):
    assert is_server_process(argv, environ) is serving
