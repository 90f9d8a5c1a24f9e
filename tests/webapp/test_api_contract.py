"""The API keeps its own contract: Schemathesis (an outside fuzzer, pinned in requirements.lock) drives the live
server (daphne on the test database) from the published OpenAPI schema and finds no response that contradicts
it. It runs with a fixed seed, every phase (examples, coverage, fuzzing and the stateful create → read → update
chains), as a user who owns data and then as a second user who owns other data and must get 404s on it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.webapp.authz_world import build_world
from tests.webapp.conftest import ROOT, SCRIPTED_ENGINE, _worker_env, wait_for
from tests.webapp.test_browser import _free_port, _up

pytestmark = pytest.mark.django_db(transaction=True)

# Every check the contract promises; none is excluded.
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,use_after_free"
SEED = 19
# Enough examples to cover each operation's parameters and bodies; few enough to keep the suite's minutes.
MAX_EXAMPLES = 5
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def api_server(tmp_path):
    port = _free_port()
    env = _worker_env(SCRIPTED_ENGINE)  # runs the fuzzer launches finish at once
    # The fuzzer is one client sending thousands of requests a minute: the per-user limit would answer most of
    # them 429 (documented, so conformant, but it would hide every other answer). The limit itself is tested in
    # test_rate_limits.py.
    env.update({"REDIS_URL": "", "STUDIO_EXECUTOR": "inprocess", "STUDIO_API_PER_MINUTE": "1000000",
                "RUBRIC_STUDIO_JUDGE_CACHE": str(tmp_path / "cache")})
    log = open(tmp_path / "daphne.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "webapp.asgi:application"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_for(lambda: _up(port), timeout=30, message="daphne to listen")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def _schemathesis(base: str, token: str, report: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [os.path.join(os.path.dirname(sys.executable), "schemathesis"), "--config-file", str(CONFIG), "run",
           f"{base}/api/schema/",
           "--header", f"Authorization: Token {token}", "--checks", CHECKS, "--seed", str(SEED),
           "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--no-shrink", "--request-timeout", "30",
           "--suppress-health-check", "all", "--warnings", "off", "--report", "junit",
           "--report-junit-path", str(report), *extra]
    # run in the report's folder: Schemathesis keeps a cache (.schemathesis/) where it runs
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=report.parent,
                          env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": ""})


@pytest.mark.timeout(900)  # about two minutes on an idle machine; room for a loaded one
def test_schemathesis_finds_no_response_that_contradicts_the_schema(api_server, tmp_path):
    world = build_world(tmp_path)
    owner = Token.objects.get_or_create(user=world.users["admin"])[0].key
    stranger = Token.objects.get_or_create(user=world.users["other_admin"])[0].key
    summary = ROOT / "var" / "schemathesis-summary.txt"
    summary.parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "owner").mkdir()
    (tmp_path / "stranger").mkdir()
    owned = _schemathesis(api_server, owner, tmp_path / "owner" / "report.xml")
    # The second user fuzzes the same ids, which name the first user's objects: each must be a documented answer
    # (404 for what is not theirs), never a leak or a 500. Fuzzing only: the coverage phase above already walked
    # every parameter's edge values.
    others = _schemathesis(api_server, stranger, tmp_path / "stranger" / "report.xml", "--phases", "fuzzing")
    summary.write_text(f"# as the owner of the data\n{owned.stdout}\n# as another user\n{others.stdout}")
    assert owned.returncode == 0, owned.stdout[-6000:] + owned.stderr[-2000:]
    assert others.returncode == 0, others.stdout[-6000:] + others.stderr[-2000:]
