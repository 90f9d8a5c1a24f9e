"""The local inference server's HTTP front, side by side with another commit's: start time, per-request latency,
rollout throughput.

    python -m bench.local_server_bench [--baseline DIR] [--rounds 5]

DIR is another checkout of this repository (e.g. `git worktree add /tmp/base <commit>`): its
`python -m training.servers.local` is started from there, so it serves with that commit's code. The two are
measured in turn at the finest grain each figure allows (this, baseline, this, ...), so that a machine whose load
drifts (a shared CI box) slows both alike; each wall-time ratio is this/baseline per pair, then the median of
the pairs; each CPU-time ratio is of the means.
- startup: from the spawn to the first 200 from /health (imports, model load, listening), `--rounds` pairs;
then both servers run, idle but for the one being measured:
- overhead: 400 GET /v1/models, 40 at a time, alternating (no model work: the HTTP front alone);
- latency: 40 single chat requests, 4 at a time, alternating (greedy, max_tokens 8);
- throughput: engine_bench's `demo` workload (64 concurrent requests of 16 prompts, temperature 1.0,
  max_tokens 32), `--rounds` pairs of rounds, completion tokens per second of wall time.
Each also as the CPU time the server's process used (user + system, all its threads, from /proc): on a machine
other work shares, wall times move with the neighbours' load and CPU times much less. CPU figures are means (the
kernel counts in 10 ms ticks), the others medians.
The table goes to stdout, everything to bench/results/local_server_bench.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.engine_bench import MODEL_DIR, ROOT, one_round, progress, rollout_requests

RESULTS = ROOT / "bench" / "results" / "local_server_bench.json"
MESSAGES = [{"role": "user", "content": "New game. Board:\n. . 2 .\n. . . .\n. 2 . .\n. . . ."}]


def start(tree: Path, port: int, log: Path) -> tuple[subprocess.Popen, float]:
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "training.servers.local", "--model", str(MODEL_DIR),
                                "--served-model-name", "base", "--port", str(port)], cwd=tree,
                               stdout=log.open("ab"), stderr=subprocess.STDOUT)
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the server in {tree} exited with {process.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process, time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.05)


def cpu_s(process: subprocess.Popen) -> float:
    """User + system seconds the server's process has used so far (all its threads)."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(trees: dict[str, Path], rounds: int, log: Path) -> dict[str, dict[str, list[float]]]:
    """Per server, each figure's samples, in pairs (sample i of one was taken next to sample i of the other)."""
    from training.servers import free_port

    samples: dict[str, dict[str, list[float]]] = {n: {} for n in trees}

    def add(name: str, key: str, value: float) -> None:
        samples[name].setdefault(key, []).append(value)

    for i in range(rounds):
        for name, tree in trees.items():
            progress(f"startup {i + 1}/{rounds}: {name}")
            process, startup = start(tree, free_port(), log)
            add(name, "startup_cpu_s", cpu_s(process))
            process.terminate()
            process.wait(timeout=30)
            add(name, "startup_s", startup)
    servers = {name: start(tree, free_port(), log)[0] for name, tree in trees.items()}
    try:
        urls = {name: f"http://127.0.0.1:{p.args[p.args.index('--port') + 1]}/v1" for name, p in servers.items()}
        clients = {name: httpx.Client(base_url=url, timeout=600) for name, url in urls.items()}
        chat = {"model": "base", "messages": MESSAGES, "temperature": 0, "max_tokens": 8}
        for client in clients.values():  # warm-up: the first forward pass of each
            client.post("/chat/completions", json=chat).raise_for_status()
        progress("overhead: GET /v1/models, alternating")
        for _ in range(10):
            for name, client in clients.items():
                used = cpu_s(servers[name])
                for _ in range(40):
                    add(name, "overhead_ms", 1e3 * timed(lambda: client.get("/models").raise_for_status()))
                add(name, "overhead_cpu_ms", 1e3 * (cpu_s(servers[name]) - used) / 40)
        progress("latency: one chat request at a time, alternating")
        for _ in range(10):
            for name, client in clients.items():
                used = cpu_s(servers[name])
                for _ in range(4):
                    add(name, "latency_ms", 1e3 * timed(
                        lambda: client.post("/chat/completions", json=chat).raise_for_status()))
                add(name, "latency_cpu_ms", 1e3 * (cpu_s(servers[name]) - used) / 4)
        for i in range(rounds):
            for name, url in urls.items():
                progress(f"throughput {i + 1}/{rounds}: {name}, 64 concurrent requests")
                used = cpu_s(servers[name])
                seconds, lengths = asyncio.run(one_round(url, rollout_requests(), 1.0, 32))
                add(name, "tokens_per_s", sum(lengths) / seconds)
                add(name, "tokens_per_cpu_s", sum(lengths) / (cpu_s(servers[name]) - used))
    finally:
        for process in servers.values():
            process.terminate()
            process.wait(timeout=30)
    return samples


def table(results: dict[str, Any]) -> str:
    names = list(results["median"])
    lines = [f"{'':<22}" + "".join(f"{n:>12}" for n in names) + (f"{'this/base':>12}" if len(names) == 2 else "")]
    for key, label in (("startup_s", "startup s"), ("startup_cpu_s", "startup CPU s"),
                       ("overhead_ms", "GET /models ms"), ("overhead_cpu_ms", "GET /models CPU ms"),
                       ("latency_ms", "chat ms p50"), ("latency_p95_ms", "chat ms p95"),
                       ("latency_cpu_ms", "chat CPU ms"), ("tokens_per_s", "rollout tokens/s"),
                       ("tokens_per_cpu_s", "rollout tokens/CPU s")):
        row = f"{label:<22}" + "".join(f"{results['median'][n][key]:>12.2f}" for n in names)
        if len(names) == 2 and key in results["ratio_this_over_baseline"]:
            row += f"{results['ratio_this_over_baseline'][key]:>11.2f}x"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    from training.fixtures.tiny_model import ensure_tiny_model

    parser = argparse.ArgumentParser(prog="python -m bench.local_server_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout of this repository")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ensure_tiny_model(MODEL_DIR)
    trees = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    log = ROOT / "var" / "bench" / "local-server-bench.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    samples = measure(trees, args.rounds, log)
    median = {n: {k: (statistics.mean if "cpu" in k else statistics.median)(v) for k, v in s.items()}
              for n, s in samples.items()}
    for name, s in samples.items():
        latency = sorted(s["latency_ms"])
        median[name]["latency_p95_ms"] = latency[int(0.95 * len(latency))]
    results: dict[str, Any] = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count(),
                               "trees": {n: str(t) for n, t in trees.items()}, "samples": samples, "median": median}
    if "baseline" in samples:
        results["ratio_this_over_baseline"] = {k: median["this"][k] / median["baseline"][k] if "cpu" in k else
                                               statistics.median(a / b for a, b in zip(samples["this"][k],
                                                                                       samples["baseline"][k]))
                                               for k in samples["this"]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
