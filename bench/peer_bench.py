"""Peer benchmark: one GRPO step of ours against TRL 1.16's GRPOTrainer on the same workload, interleaved.

    python -m bench.peer_bench [--rounds 3] [--steps 12] [--warmup 2] [--lr 3e-3] [--threads 2] [--server inprocess]
    (`make bench` runs it; `make trl-venv` builds .venv-trl with TRL 1.16.0 pinned, $TRL_PYTHON points at it)

Workload (both sides): the tiny Qwen2 the project builds, 1 prompt x 8 completions x exactly 32 tokens
(ours: `sampling.ignore_eos`; TRL: `min_new_tokens`), LoRA r=8 alpha 16 on all linear layers, beta 0, one
update per generation, constant learning rate, std-scaled advantages, float32 on CPU, 2 threads each
(`--threads`: on a machine busy with other work, torch's multi-threaded kernels stall on descheduled threads
and 1 thread gives steadier numbers).
Reward: the share of the completion's characters that are TARGET, the same function on both sides.

Each round runs TRL for `--steps` steps and then ours (the order flips every round, so neither always runs on
a warmer or quieter machine); the first `--warmup` steps of each run are not timed. Full step = the time
between consecutive step ends (everything the trainer does). Generation = TRL's generate-and-score call / our
rollout phase (the toy reward's cost is included on both sides); optimisation = TRL's step less generation /
our `train_step`. Printed: medians and TRL/ours ratios (> 1 means ours is faster), our engine overhead
(full step - generation - optimisation) as a share of the step, and the learning curves (mean reward over
rounds, first and last steps). `--server` picks our inference server kind: `inprocess` (default: the server's
engine in the trainer's process, as a run on one machine would use it) or `local` (the same engine behind HTTP in
a process of its own). Everything also goes to bench/results/peer_bench.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

for _key, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                     "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
    os.environ.setdefault(_key, _value)

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "var" / "tiny-model"
RESULTS = ROOT / "bench" / "results" / "peer_bench.json"
PROMPT = "New game. Board:\n. . 2 .\n. . . .\n. 2 . .\n. . . ."
TARGET = "e"


def progress(message: str) -> None:
    print(f"[peer_bench] {message}", file=sys.stderr, flush=True)


def toy_reward(text: str) -> float:
    return text.count(TARGET) / max(len(text), 1)


def run_trl(python: str, steps: int, lr: float, seed: int, out: Path, threads: int) -> list[dict[str, Any]]:
    command = [python, str(ROOT / "bench" / "trl_side.py"), "--threads", str(threads), "--model", str(MODEL_DIR),
               "--steps", str(steps),
               "--lr", str(lr), "--prompt", PROMPT, "--target", TARGET, "--seed", str(seed), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the TRL side failed:\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"step"')]
    rows = []
    for prev, rec in zip(records, records[1:]):
        full = rec["end"] - prev["end"]
        rows.append({"step": rec["step"], "full_s": full, "generation_s": rec["generation_s"],
                     "optimisation_s": full - rec["generation_s"], "reward_mean": rec["reward_mean"]})
    first = records[0]
    return [{"step": first["step"], "full_s": None, "generation_s": first["generation_s"], "optimisation_s": None,
             "reward_mean": first["reward_mean"]}] + rows


def run_ours(steps: int, lr: float, seed: int, out: Path, threads: int,
             server: str = "inprocess") -> list[dict[str, Any]]:
    import shutil

    import torch

    from training.config import RunConfig
    from training.events import StepFinished
    from training import run
    from training.types import Score

    torch.set_num_threads(threads)
    shutil.rmtree(out, ignore_errors=True)
    config = RunConfig.model_validate({
        "name": "peer", "base_model": str(MODEL_DIR), "scenarios": [{"id": "board", "user_message": PROMPT}],
        "environment": {"kind": "chat"}, "sampling": {"temperature": 1.0, "max_tokens": 32, "ignore_eos": True},
        "grpo": {"group_size": 8, "groups_per_step": 1, "learning_rate": lr, "scale_rewards": "std",
                 "micro_batch_size": 8, "beta": 0.0, "max_grad_norm": 1.0},
        "lora": {"r": 8, "alpha": 16}, "server": {"kind": server}, "steps": steps, "output_dir": str(out), "seed": seed, "device": "cpu",
    })

    async def score(group):
        return [Score(reward=toy_reward(t.messages[-1]["content"] or "")) for t in group.trajectories]

    ends: list[float] = []

    def sink(event: Any) -> None:
        if isinstance(event, StepFinished):
            ends.append(time.monotonic())

    summary = run(config, scorer=score, sink=sink)
    rows = []
    for i, h in enumerate(summary.history):
        rows.append({"step": h["step"], "full_s": ends[i] - ends[i - 1] if i else None,
                     "generation_s": h["time_rollout_s"], "optimisation_s": h["time_train_s"],
                     "save_load_s": h["time_load_s"], "reward_mean": h["reward_mean"]})
    return rows


def median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows if r.get(key) is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--server", choices=("inprocess", "local"), default="inprocess")
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # both sides, before torch is imported (and in children)
    python = os.environ.get("TRL_PYTHON") or str(ROOT / ".venv-trl" / "bin" / "python")
    if not Path(python).exists():
        raise SystemExit(f"no TRL interpreter at {python}; run `make trl-venv` (or set TRL_PYTHON)")
    from training.fixtures.tiny_model import ensure_tiny_model

    ensure_tiny_model(MODEL_DIR)
    runs: dict[str, list[list[dict[str, Any]]]] = {"trl": [], "ours": []}
    for r in range(args.rounds):
        order = ("trl", "ours") if r % 2 == 0 else ("ours", "trl")
        for side in order:
            progress(f"round {r + 1}/{args.rounds}: {side}")
            out = ROOT / "var" / "bench" / "peer" / f"{side}-{r}"
            rows = (run_trl(python, args.steps, args.lr, r, out, args.threads) if side == "trl"
                    else run_ours(args.steps, args.lr, r, out, args.threads, args.server))
            runs[side].append(rows)
    timed = {side: [row for rows in side_runs for row in rows[args.warmup:]] for side, side_runs in runs.items()}
    summary: dict[str, Any] = {}
    print(f"GRPO step, TRL 1.16.0 vs ours: 1 prompt x 8 x 32 tokens, LoRA r8 all-linear, beta 0, "
          f"CPU {args.threads} thread(s); {args.rounds} interleaved rounds x {args.steps} steps, "
          f"first {args.warmup} untimed; our server: {args.server}; medians")
    print(f"{'component':<14}{'TRL s':>9}{'ours s':>9}{'TRL/ours':>10}")
    for key, label in (("generation_s", "generation"), ("optimisation_s", "optimisation"), ("full_s", "full step")):
        trl, ours = median(timed["trl"], key), median(timed["ours"], key)
        summary[label] = {"trl_s": trl, "ours_s": ours, "trl_over_ours": trl / ours}
        print(f"{label:<14}{trl:>9.3f}{ours:>9.3f}{trl / ours:>10.2f}")
    # Per step, then the median: medians of the parts do not add up to the median of the whole.
    for row in timed["ours"]:
        row["overhead_s"] = row["full_s"] - row["generation_s"] - row["optimisation_s"]
        row["overhead_share"] = row["overhead_s"] / row["full_s"]
    overhead, share = median(timed["ours"], "overhead_s"), median(timed["ours"], "overhead_share")
    summary["ours_overhead"] = {"seconds": overhead, "share_of_step": share,
                                "save_load_s": median(timed["ours"], "save_load_s")}
    print(f"our engine overhead (step - generation - optimisation, per step): {overhead * 1000:.1f} ms = "
          f"{100 * share:.1f} % of the step "
          f"(adapter save + hand-off {1000 * median(timed['ours'], 'save_load_s'):.1f} ms)")
    curves = {side: [statistics.fmean(rows[i]["reward_mean"] for rows in side_runs) for i in range(args.steps)]
              for side, side_runs in runs.items()}
    k = max(1, args.steps // 4)
    print(f"learning curve (reward = share of '{TARGET}' characters, mean over {args.rounds} seeds): "
          f"first {k} steps -> last {k} steps")
    for side, curve in curves.items():
        print(f"  {side:<5} {statistics.fmean(curve[:k]):.3f} -> {statistics.fmean(curve[-k:]):.3f}   "
              f"{' '.join(f'{v:.2f}' for v in curve)}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), "summary": summary, "curves": curves, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
