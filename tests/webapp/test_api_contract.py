"""The API keeps its own contract: Schemathesis (an outside fuzzer, pinned in requirements.lock) drives the live
server (daphne on the test database) from the published OpenAPI schema and finds no response that contradicts
it, with every check (tests/webapp/schemathesis.toml lists each narrowing and its reason), on every operation of
the schema, those that make the server call out included (judge re-scores, MCP tests, distillations: the served
app refuses every outbound address, STUDIO_EGRESS_DENY_ALL). As a user who owns data: the coverage phase (each
parameter's edge values, nearly the same under any seed: run once, under the first), then per seed the fuzzing and the stateful
create → read → update chains; then a second user who owns other data fuzzes the same ids and must get 404s.

Deterministic in `make test`: it replays FIXED_SEEDS. `make fuzz` draws fresh seeds (STUDIO_SCHEMATHESIS_SEEDS=
fresh:N) and STUDIO_SCHEMATHESIS_SEEDS=a[,b,…] replays given ones. Either way it prints the seeds and, per
operation, the answers it got (tests/webapp/fuzz_summary.py), and a failure prints the command that replays it.
The served app raises every limit answered with 429 (STUDIO_THROTTLE_SCALE): a throttle would hide the rest of
the API from the fuzzer; the limits themselves are tested in test_rate_limits.py."""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.webapp.authz_world import build_world
from tests.webapp.conftest import ROOT, SCRIPTED_ENGINE, _worker_env
from tests.webapp.fuzz_summary import summarise
from tests.webapp.world import start_daphne, stop_daphne

pytestmark = pytest.mark.django_db(transaction=True)

# The seeds `make test` replays, so that the suite answers the same on the same code (the same requests, answers
# and verdict run after run). A failure `make fuzz` finds under a fresh seed becomes a fixed case: add that seed
# here (it generates the same requests while the schema and this file's settings stay the same; an answer that
# depends on what earlier seeds stored may differ, so first replay it with the printed command), or, better where
# the printed request shows the cause, a regular test of that operation in its own test file (which outlives
# schema changes). One seed: a second one (20261207, green when it was dropped) cost `make test` 80 s of its 20
# minutes; more seeds are `make fuzz`'s work.
FIXED_SEEDS = [1234]
SEEDS_VARIABLE = "STUDIO_SCHEMATHESIS_SEEDS"


def seeds_from(raw: str | None) -> list[int]:
    """FIXED_SEEDS when unset; `fresh:N` (or `fresh`, 3) draws N fresh seeds; `a,b,…` replays those."""
    raw = (raw or "").strip()
    if not raw:
        return list(FIXED_SEEDS)
    if match := re.fullmatch(r"fresh(?::([1-9][0-9]?))?", raw):
        return [random.SystemRandom().randrange(1, 2**31) for _ in range(int(match.group(1) or 3))]
    if re.fullmatch(r"[0-9]+(,[0-9]+)*", raw):
        return [int(x) for x in raw.split(",")]
    raise ValueError(f"{SEEDS_VARIABLE}={raw!r}: give seeds as a,b,… or fresh:N (N fresh seeds, 1-99)")


SEEDS = seeds_from(os.environ.get(SEEDS_VARIABLE))
# Per operation and seed (the edge values, run once, take about half the time). A fresh seed replays only with the
# same count.
MAX_EXAMPLES = 3
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def api_server(tmp_path):
    """The served app of the tests' world (tests/webapp/world.py), with settings of its own: not the shared one."""
    env = _worker_env(SCRIPTED_ENGINE)  # runs the fuzzer launches finish at once
    # The fuzzer is one client sending thousands of requests a minute: every limit answered with 429 (per user,
    # per address, the caps on distillations, Try it and servers) would answer most of them 429 (documented, so
    # conformant, but it would hide every other answer): one setting raises them all. Every outbound address a
    # project gives is refused, so the operations that make the server call out are fuzzed like any other and
    # nothing leaves the machine.
    env.update({"REDIS_URL": "", "STUDIO_EXECUTOR": "inprocess", "STUDIO_THROTTLE_SCALE": "1000000",
                "STUDIO_EGRESS_DENY_ALL": "1", "RUBRIC_STUDIO_JUDGE_CACHE": str(tmp_path / "cache")})
    served = start_daphne(env, tmp_path / "daphne.log")
    yield served.url
    stop_daphne(served)


def _schemathesis(base: str, token: str, report: Path, seed: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [os.path.join(os.path.dirname(sys.executable), "schemathesis"), "--config-file", str(CONFIG), "run",
           f"{base}/api/schema/",
           "--header", f"Authorization: Token {token}", "--seed", str(seed),
           "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--no-shrink", "--request-timeout", "30",
           "--suppress-health-check", "all", "--warnings", "off", "--report", "ndjson",
           "--report-ndjson-path", str(report), *extra]
    report.parent.mkdir(parents=True)
    # run in the report's folder: Schemathesis keeps a cache (.schemathesis/) where it runs
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=report.parent,
                          env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": ""})


# About two minutes for the fixed seed on an idle machine; room for a loaded one.
@pytest.mark.timeout(900 + 300 * len(SEEDS))
def test_schemathesis_finds_no_response_that_contradicts_the_schema_on_any_operation(api_server, tmp_path):
    world = build_world(tmp_path)
    owner = Token.objects.get_or_create(user=world.users["admin"])[0].key
    stranger = Token.objects.get_or_create(user=world.users["other_admin"])[0].key
    print(f"Schemathesis seeds {SEEDS}")
    # The edge values hardly depend on the seed (and take the longest): once, under the first.
    runs = [("the owner, edge values", tmp_path / "edges" / "events.ndjson", _schemathesis(
        api_server, owner, tmp_path / "edges" / "events.ndjson", SEEDS[0], "--phases", "examples,coverage"))]
    for seed in SEEDS:
        report = tmp_path / f"owner-{seed}" / "events.ndjson"
        runs.append((f"the owner, seed {seed}", report,
                     _schemathesis(api_server, owner, report, seed, "--phases", "fuzzing,stateful")))
        # The second user fuzzes the same ids, which name the first user's objects: each must be a documented
        # answer (404 for what is not theirs), never a leak or a 500.
        report = tmp_path / f"stranger-{seed}" / "events.ndjson"
        runs.append((f"another user, seed {seed}", report,
                     _schemathesis(api_server, stranger, report, seed, "--phases", "fuzzing")))
    summary = summarise([report for _, report, _ in runs if report.exists()])
    table = summary.render()
    print(table)
    saved = ROOT / "var" / "schemathesis-summary.txt"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(table + "".join(f"\n# as {who}\n{run.stdout}" for who, _, run in runs))
    replay = (f"{SEEDS_VARIABLE}={','.join(map(str, SEEDS))} .venv/bin/python -m pytest -s "
              "tests/webapp/test_api_contract.py")
    failed = [(who, run) for who, _, run in runs if run.returncode != 0]
    assert not failed, (f"seeds {SEEDS}; replay with: {replay}\n{table}\n" + "\n".join(
        f"## as {who}\n{run.stdout[-6000:]}{run.stderr[-2000:]}" for who, run in failed))
    # Every operation was called and answered something other than its throttle: nothing hid from the fuzzer.
    assert summary.operations and not summary.unreached, table
    assert not summary.mostly_throttled, table
