"""Page latency while a run trains beside the web app, against the same pages idle (embedded default).

    python -m bench.page_latency_bench [--steps 8]

Starts `manage.py studio_demo --serve` (SQLite, in-process executor, tiny model) in a scratch directory, logs
in over HTTP like a browser, and times two pages while the demo run trains (the engine runs in a subprocess
beside daphne) and again once it has finished: the project list, whose content does not change (the fair
comparison: ratio training / idle near 1 means training does not slow the pages), and the run page itself
(it grows as steps arrive, so its idle figure is of the finished, largest page).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-password-1"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _start(scratch: Path, port: int, steps: int) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{scratch / 'bench.db'}", STUDIO_RUNS_DIR=str(scratch / "runs"),
               DEMO_PASSWORD=PASSWORD, SECRET_KEY="bench-only-" + "x" * 40, LITELLM_LOCAL_MODEL_COST_MAP="True",
               HF_HUB_OFFLINE="1")
    for name in ("REDIS_URL", "JUDGE_MODEL"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "manage.py", "studio_demo", "--steps", str(steps), "--serve",
                             "--port", str(port), "--model-dir", str(ROOT / "var" / "tiny-model")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = None
    for line in proc.stdout:
        if (m := re.search(r"run:\s+(http://\S+)", line)):
            url = m.group(1)
        if "Serving on" in line:
            break
    if url is None:
        proc.kill()
        raise SystemExit("studio_demo did not print a run URL")
    return proc, url


def _login(client: httpx.Client, base: str) -> None:
    for _ in range(100):  # daphne needs a moment after exec
        try:
            client.get(f"{base}/login/")
            break
        except httpx.TransportError:
            time.sleep(0.2)
    token = client.cookies["csrftoken"]
    r = client.post(f"{base}/login/", data={"username": "demo", "password": PASSWORD,
                                             "csrfmiddlewaretoken": token}, headers={"Referer": f"{base}/login/"})
    if "sessionid" not in client.cookies:
        raise SystemExit(f"login failed: HTTP {r.status_code}")


def _sample(client: httpx.Client, url: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = client.get(url)
    elapsed = time.perf_counter() - t0
    status = re.search(r'id="run-status">([^<]+)<', r.text)
    return elapsed, status.group(1).strip() if status else "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--idle-samples", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        proc, url = _start(Path(scratch), args.port, args.steps)
        base = url.split("/runs/")[0]
        try:
            with httpx.Client(timeout=30, follow_redirects=True) as client:
                _login(client, base)
                training: dict[str, list[float]] = {"project list": [], "run page": []}
                while True:
                    elapsed, status = _sample(client, url)
                    if status in ("Completed", "Failed", "Cancelled", "Crashed"):
                        break
                    if status == "Running":
                        training["run page"].append(elapsed)
                        training["project list"].append(_sample(client, f"{base}/")[0])
                    time.sleep(0.1)
                idle = {"project list": [_sample(client, f"{base}/")[0] for _ in range(args.idle_samples)],
                        "run page": [_sample(client, url)[0] for _ in range(args.idle_samples)]}
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    samples = len(training["run page"])
    if status != "Completed" or not samples:
        raise SystemExit(f"the demo run ended {status} with {samples} samples while running")
    print(f"page latency over HTTP, embedded default, {args.steps}-step demo run "
          f"({samples} samples per page while training, {args.idle_samples} idle)")
    print(f"{'page':14} {'state':9} {'p50 ms':>8} {'p95 ms':>8}")
    for page in training:
        for state, values in (("idle", idle[page]), ("training", training[page])):
            print(f"{page:14} {state:9} {statistics.median(values) * 1e3:8.1f} {_pct(values, 0.95) * 1e3:8.1f}")
    t, i = training["project list"], idle["project list"]
    print(f"project list, training / idle: p50 {statistics.median(t) / statistics.median(i):.2f}x, "
          f"p95 {_pct(t, 0.95) / _pct(i, 0.95):.2f}x")


if __name__ == "__main__":
    main()
