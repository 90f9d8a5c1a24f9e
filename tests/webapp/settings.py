"""Settings for the web app's tests: the production settings module on real PostgreSQL and Redis.

DATABASE_URL / REDIS_URL from the environment win; the defaults are the local services `make services`
starts. pytest-django creates (and drops) the `test_<name>` database itself.
"""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rubric_studio")
# A Redis database of its own, so tests never meet another process's queues or channel groups.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
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

from webapp.settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins; tests only
