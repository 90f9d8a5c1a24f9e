"""Settings for the web app's tests: the production settings module on real PostgreSQL and Redis.

DATABASE_URL / REDIS_URL from the environment win; the defaults are the local services `make services`
starts. pytest-django creates (and drops) the `test_<name>` database itself.
"""
from __future__ import annotations

import json
import os
import tempfile

from tests.built_models import tiny_model_path

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rubric_studio")
# A Redis database of its own, so tests never meet another process's queues or channel groups.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")


def _worker_redis_url(url: str, worker: str) -> str:
    """Under pytest-xdist, worker gwN's Redis database: the Nth of STUDIO_TEST_REDIS_DBS (e.g. "13,14") when set,
    else REDIS_URL's database plus N. Each worker's Celery queues, channel groups and caches are its own; a
    Celery worker a test starts inherits it (os.environ)."""
    index = int(worker.removeprefix("gw"))
    base, _, db = url.rpartition("/")
    listed = [d.strip() for d in os.environ.get("STUDIO_TEST_REDIS_DBS", "").split(",") if d.strip()]
    if listed and index >= len(listed):
        raise RuntimeError(f"STUDIO_TEST_REDIS_DBS={os.environ['STUDIO_TEST_REDIS_DBS']} names {len(listed)} Redis "
                           f"databases for at least {index + 1} pytest-xdist workers")
    chosen = int(listed[index]) if listed else int(db or 0) + index
    if not 0 <= chosen <= 15:
        raise RuntimeError(f"worker {worker} would use Redis database {chosen}; set STUDIO_TEST_REDIS_DBS")
    return f"{base}/{chosen}"


# Once per pytest-xdist worker, in the worker itself: the processes its tests start (Celery workers, daphne)
# inherit the result in their environment and must not shift it again (gw1's Celery workers once listened on
# the database after gw1's). The worker's own folder too: the controller made one before starting the workers,
# and two workers sharing it shared the runs' output folders and the Celery workers' logs.
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist_worker and os.environ.get("STUDIO_TEST_WORKER") != _xdist_worker:
    os.environ["STUDIO_TEST_WORKER"] = _xdist_worker
    if os.environ["REDIS_URL"]:
        os.environ["REDIS_URL"] = _worker_redis_url(os.environ["REDIS_URL"], _xdist_worker)
    os.environ["STUDIO_VAR_DIR"] = tempfile.mkdtemp(prefix=f"studio-tests-{_xdist_worker}-")
    os.environ["STUDIO_CHANNEL_PREFIX"] = f"studio-test-{os.getpid()}"
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x" * 40)
os.environ.setdefault("STUDIO_VAR_DIR", tempfile.mkdtemp(prefix="studio-tests-"))
os.environ.setdefault("STUDIO_CHANNEL_PREFIX", f"studio-test-{os.getpid()}")
os.environ.setdefault("STUDIO_HEARTBEAT_S", "0.5")
os.environ.setdefault("STUDIO_STALE_AFTER_S", "3")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The tests' MCP servers listen on loopback, which a shared deployment's web process may not reach by default.
os.environ.setdefault("STUDIO_MCP_ALLOWED_HOSTS", "127.0.0.1,localhost")
# Catalogue tests name placeholder models for a scripted engine; the tests of the model check turn it on.
os.environ.setdefault("STUDIO_MODEL_CHECK", "off")
# The tests' deployment trains on the CPU (also where a GPU is visible): runs take it from here, not from a
# launch's overrides (webapp/run_policy.py). Worker processes the tests start inherit it.
os.environ.setdefault("STUDIO_RUN_WORKER_CONFIG", '{"device": "cpu"}')
# Runs keep every checkpoint unless a test chooses a policy (tests/webapp/test_checkpoint_retention.py): many
# tests fork, serve or load an earlier step of a finished run.
os.environ.setdefault("STUDIO_CHECKPOINT_KEEP_LAST", "0")

# The tests' deployment lists the tiny model the tests build (tests/built_models.py) as `test-tiny`, beside the
# shipped entries: agents name it, and the processes the tests start (daphne, Celery) read the same list.
os.environ.setdefault("STUDIO_BASE_MODELS", json.dumps({"test-tiny": {
    "source": str(tiny_model_path()), "context_length": 1024,
    "description": "the tests' tiny 2048 model (built on first use)"}}))

from webapp.settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins; tests only
