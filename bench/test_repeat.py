"""Finding flaky tests: the suite N times in a fresh clone, or chosen tests N times under load (issue 44).

    python -m bench.test_repeat repeat --n 5                 # `make test-repeat N=5`
    python -m bench.test_repeat stress --n 20 TEST_ID ...    # `make stress TESTS="..." N=20`

`repeat` clones the current commit (git clone of HEAD: uncommitted changes are not in it, as on CI) into a
temporary folder, links this checkout's virtual environment into it (nothing is reinstalled), and runs the
suite there N times with the pytest options of `make test` (PYTEST_PARALLEL in the Makefile), one JUnit XML per
run. It prints each run's time and, per test that ever failed, how many runs it failed in and the first line of
each distinct failure.

`stress` runs the chosen tests N times each in this working tree, in one pytest process (each test repeated
N times by a small plugin, below), while something else loads the machine beside them: `--beside cpu` (the
default) one busy process per core, `--beside suite` the rest of the suite in `make test`'s parallel mode, over
and over. It prints failures per test. Each mode uses a test database and Redis databases of its own, so it can
run beside another checkout's tests on the same services.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `make test`'s options; the Makefile passes its PYTEST_PARALLEL so the two cannot drift apart.
DEFAULT_PARALLEL = "-q -rs -n 2 --dist loadgroup --durations=25"
SERVICES_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"}
ROUND = re.compile(r"\[stress\d+\]$|(?<=\[)stress\d+-|-stress\d+(?=[-\]])")


@dataclass
class Tally:
    """Per test id: the runs it failed in and the first line of each distinct failure."""
    failed_in: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    messages: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    passed: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add_junit(self, path: Path, run: int) -> tuple[int, int]:
        """Reads one JUnit XML; returns (tests, failures) of that run. A missing file (pytest crashed or hung
        past its timeout) counts as one failure of the run itself."""
        if not path.exists():
            self.failed_in["<the pytest run itself>"].add(run)
            self._message("<the pytest run itself>", f"no JUnit report: pytest did not finish (run {run})")
            return 0, 1
        tests = failures = 0
        for case in ET.parse(path).getroot().iter("testcase"):
            tests += 1
            name = _test_id(case)
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            if bad is None:
                if case.find("skipped") is None:
                    self.passed[name] += 1
                continue
            failures += 1
            self.failed_in[name].add(run)
            text = (bad.get("message") or bad.text or "").strip().splitlines()
            self._message(name, text[0][:300] if text else "(no message)")
        return tests, failures

    def _message(self, name: str, line: str) -> None:
        if line not in self.messages[name]:
            self.messages[name].append(line)

    def report(self, runs: int, each: str = "runs") -> str:
        if not self.failed_in:
            return f"no test failed in {runs} {each}"
        lines = [f"{'failed':>8}  test (first line of each distinct failure)"]
        for name, failed in sorted(self.failed_in.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"{len(failed):>3} / {runs:<3} {name}")
            lines.extend(f"{'':11}- {m}" for m in self.messages[name])
        return "\n".join(lines)


def _test_id(case: ET.Element) -> str:
    """JUnit's classname (tests.webapp.test_x) and name back into a pytest node id, the stress round removed."""
    module = case.get("classname", "").split(".")
    cls = []
    while module and module[-1][:1].isupper():
        cls.insert(0, module.pop())  # a test class
    name = ROUND.sub("", case.get("name", ""))
    return "::".join(["/".join(module) + ".py", *cls, name])


def _env(database: str, redis_dbs: str) -> dict[str, str]:
    """The services of this tool's runs: a test database and Redis databases no other checkout's run uses."""
    env = {**os.environ, **SERVICES_ENV}
    env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{database}"
    first = redis_dbs.split(",")[0]
    env["REDIS_URL"] = f"redis://127.0.0.1:6379/{first}"
    env["STUDIO_TEST_REDIS_DBS"] = redis_dbs
    return env


def repeat(args: argparse.Namespace) -> int:
    venv = Path(args.venv).resolve()
    if not (venv / "bin" / "python").exists():
        sys.exit(f"no virtual environment at {venv} (make venv, or pass --venv)")
    with tempfile.TemporaryDirectory(prefix="studio-repeat-") as tmp:
        # Readable by others, as a clone in an ordinary folder is: the stdio MCP attack test runs its server as
        # `nobody` (tests/security/test_mcp_stdio_attacks.py), which a private temporary folder (0700) refused.
        os.chmod(tmp, 0o755)
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                              check=True).stdout.strip()
        (clone / ".venv").symlink_to(venv)
        env = _env("rubric_studio_repeat", args.redis_dbs)
        tally, times = Tally(), []
        print(f"commit {head}, cloned into {clone}; {args.n} runs of: pytest {args.pytest_args}", flush=True)
        for run in range(1, args.n + 1):
            junit = Path(tmp) / f"run-{run}.xml"
            command = [str(clone / ".venv" / "bin" / "python"), "-m", "pytest", *shlex.split(args.pytest_args),
                       f"--junitxml={junit}", "-p", "no:cacheprovider"]
            started = time.monotonic()
            log = Path(tmp) / f"run-{run}.log"
            with open(log, "w") as out:
                code = subprocess.run(command, cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
            times.append(time.monotonic() - started)
            tests, failures = tally.add_junit(junit, run)
            print(f"run {run}: {times[-1] / 60:.1f} min, {tests} tests, {failures} failed (exit {code})", flush=True)
            if args.keep_logs:
                (Path(args.keep_logs) / f"run-{run}.log").write_bytes(log.read_bytes())
                if junit.exists():
                    (Path(args.keep_logs) / f"run-{run}.xml").write_bytes(junit.read_bytes())
        print(tally.report(args.n))
        print("run times (min): " + ", ".join(f"{t / 60:.1f}" for t in times))
        return 1 if tally.failed_in else 0


def _load(kind: str, tests: list[str], venv: Path, env: dict[str, str]) -> list[subprocess.Popen]:
    """What runs beside the stressed tests: busy loops on every core, or the rest of the suite again and again."""
    if kind == "none":
        return []
    if kind == "cpu":
        burn = "import time\nwhile True:\n    sum(i * i for i in range(10000))\n"
        return [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(os.cpu_count() or 1)]
    deselect = [f"--deselect={t}" for t in tests]
    loop = (f"while true; do {shlex.quote(str(venv / 'bin' / 'python'))} -m pytest {DEFAULT_PARALLEL} -p no:cacheprovider "
            f"{' '.join(shlex.quote(d) for d in deselect)} >/dev/null 2>&1; done")
    beside = {**env, **_env("rubric_studio_beside", "11,12")}
    return [subprocess.Popen(["bash", "-c", loop], cwd=ROOT, env=beside, start_new_session=True)]


def stress(args: argparse.Namespace) -> int:
    venv = Path(args.venv).resolve()
    env = _env("rubric_studio_stress", "15")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    # A stop from outside (timeout, Ctrl-C's cousin) still ends the load beside: the `finally` below must run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    beside = _load(args.beside, args.tests, venv, env)
    try:
        with tempfile.TemporaryDirectory(prefix="studio-stress-") as tmp:
            junit = Path(tmp) / "stress.xml"
            command = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "bench.test_repeat",
                       f"--stress-count={args.n}", f"--junitxml={junit}", "-p", "no:cacheprovider",
                       *shlex.split(args.pytest_args), *args.tests]
            print(f"{args.n} rounds of {len(args.tests)} test id(s), beside: {args.beside}", flush=True)
            started = time.monotonic()
            code = subprocess.run(command, cwd=ROOT, env=env).returncode
            tally = Tally()
            tally.add_junit(junit, 1)
            print(f"\n{time.monotonic() - started:.0f} s (pytest exit {code})")
            # failures per test are counted per round here: the rounds are test cases of one run
            counts = _per_round(junit)
            for name in sorted(set(counts) | set(tally.passed)):
                failed, total = counts.get(name, (0, 0))
                print(f"{failed:>3} / {total:<3} failed  {name}")
                for message in tally.messages.get(name, []):
                    print(f"{'':16}- {message}")
            return 1 if any(f for f, _ in counts.values()) or code not in (0, 1) else 0
    finally:
        for proc in beside:
            try:
                os.killpg(proc.pid, signal.SIGKILL) if args.beside == "suite" else proc.kill()
            except ProcessLookupError:
                pass


def _per_round(junit: Path) -> dict[str, tuple[int, int]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    if not junit.exists():
        return {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = _test_id(case)
        if case.find("skipped") is not None:
            continue
        counts[name][1] += 1
        if case.find("failure") is not None or case.find("error") is not None:
            counts[name][0] += 1
    return {k: (v[0], v[1]) for k, v in counts.items()}


# The pytest plugin of `stress` (loaded with -p bench.test_repeat): each collected test, N times.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--stress-count", type=int, default=1, help="run each test this many times (bench/test_repeat.py)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    count = metafunc.config.getoption("stress_count", 1)
    if count > 1:
        metafunc.fixturenames.append("_stress_round")
        metafunc.parametrize("_stress_round", range(count), ids=[f"stress{k}" for k in range(count)], indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Round by round: each round runs the chosen tests in their usual order, so a test meets what the tests
    before it leave behind (the rounds of one test one after another would not)."""
    if config.getoption("stress_count", 1) > 1:
        items.sort(key=lambda item: getattr(getattr(item, "callspec", None), "params", {}).get("_stress_round", 0))


@pytest.fixture
def _stress_round(request: pytest.FixtureRequest) -> int:
    return request.param


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    rep = sub.add_parser("repeat", help="the whole suite N times in a fresh clone of HEAD")
    rep.add_argument("--n", type=int, default=5)
    rep.add_argument("--pytest-args", default=DEFAULT_PARALLEL, help="make test's pytest options")
    rep.add_argument("--redis-dbs", default="9,10", help="Redis databases of the runs' xdist workers")
    rep.add_argument("--keep-logs", default="", help="a folder to copy each run's log and JUnit XML to")
    st = sub.add_parser("stress", help="chosen tests N times each while the machine is loaded")
    st.add_argument("tests", nargs="+", help="pytest node ids")
    st.add_argument("--n", type=int, default=20)
    st.add_argument("--beside", choices=("cpu", "suite", "none"), default="cpu")
    st.add_argument("--pytest-args", default="", help="more pytest options, e.g. '-x' or '-p no:randomly'")
    for p in (rep, st):
        p.add_argument("--venv", default=str(ROOT / ".venv"), help="the virtual environment to run with (reused)")
    args = parser.parse_args(argv)
    return repeat(args) if args.mode == "repeat" else stress(args)


if __name__ == "__main__":
    sys.exit(main())
