"""The API keeps its own contract: Schemathesis (an outside fuzzer, pinned in requirements.lock) drives the live
server (daphne on the test database) from the published OpenAPI schema and finds no response that contradicts
it, with every check (tests/webapp/schemathesis.toml lists each narrowing and its reason). Every run draws a
fresh seed, so each change meets other inputs than the last: as a user who owns data, the coverage phase (each
parameter's edge values), the fuzzing and the stateful create → read → update chains; then a second user who
owns other data fuzzes the same ids and must get 404s on them. A failure prints its seed and the command that
replays it (STUDIO_SCHEMATHESIS_SEEDS=a[,b,…] replays one or several)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.webapp.authz_world import build_world
from tests.webapp.conftest import ROOT, SCRIPTED_ENGINE, _worker_env, wait_for
from tests.webapp.test_browser import _free_port, _up

pytestmark = pytest.mark.django_db(transaction=True)

# A fresh seed each run (the suite runs on every change) unless STUDIO_SCHEMATHESIS_SEEDS replays earlier ones.
SEEDS = [int(x) for x in os.environ["STUDIO_SCHEMATHESIS_SEEDS"].split(",")] \
    if os.environ.get("STUDIO_SCHEMATHESIS_SEEDS") else [random.SystemRandom().randrange(1, 2**31)]
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


def _schemathesis(base: str, token: str, report: Path, seed: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [os.path.join(os.path.dirname(sys.executable), "schemathesis"), "--config-file", str(CONFIG), "run",
           f"{base}/api/schema/",
           "--header", f"Authorization: Token {token}", "--seed", str(seed),
           "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--no-shrink", "--request-timeout", "30",
           "--suppress-health-check", "all", "--warnings", "off", "--report", "junit",
           "--report-junit-path", str(report), *extra]
    report.parent.mkdir(parents=True)
    # run in the report's folder: Schemathesis keeps a cache (.schemathesis/) where it runs
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=report.parent,
                          env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": ""})


@pytest.mark.timeout(1200)  # about two minutes on an idle machine; room for a loaded one
def test_schemathesis_finds_no_response_that_contradicts_the_schema_under_a_fresh_seed(api_server, tmp_path):
    world = build_world(tmp_path)
    owner = Token.objects.get_or_create(user=world.users["admin"])[0].key
    stranger = Token.objects.get_or_create(user=world.users["other_admin"])[0].key
    print(f"Schemathesis seeds {SEEDS}")
    runs = []
    for seed in SEEDS:
        runs.append((f"the owner, seed {seed}", _schemathesis(api_server, owner, tmp_path / f"owner-{seed}" / "report.xml",
                                                              seed, "--phases", "examples,coverage,fuzzing,stateful")))
        # The second user fuzzes the same ids, which name the first user's objects: each must be a documented
        # answer (404 for what is not theirs), never a leak or a 500.
        runs.append((f"another user, seed {seed}", _schemathesis(
            api_server, stranger, tmp_path / f"stranger-{seed}" / "report.xml", seed, "--phases", "fuzzing")))
    summary = ROOT / "var" / "schemathesis-summary.txt"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text("".join(f"# as {who}\n{run.stdout}\n" for who, run in runs))
    failed = [(who, run) for who, run in runs if run.returncode != 0]
    replay = (f"STUDIO_SCHEMATHESIS_SEEDS={','.join(map(str, SEEDS))} .venv/bin/python -m pytest "
              "tests/webapp/test_api_contract.py")
    assert not failed, (f"seeds {SEEDS}; replay with: {replay}\n" + "\n".join(
        f"## as {who}\n{run.stdout[-6000:]}{run.stderr[-2000:]}" for who, run in failed))
