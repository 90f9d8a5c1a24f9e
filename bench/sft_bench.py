"""SFT speed against TRL 1.16's SFTTrainer: the same conversations, model, LoRA and token budget, interleaved.

    python -m bench.sft_bench [--rounds 4] [--steps 10] [--warmup 2] [--threads 1] [--max-length 1024]
                              [--batch-size 2] [--conversations 400]
    (`make trl-venv` builds .venv-trl; $TRL_PYTHON points at its python, default .venv-trl/bin/python)

Workload (both sides): `--conversations` synthetic 2048 games of the tiny model's task (multi-turn, a system
prompt, 1-6 assistant moves each; tokens ~100-450 a conversation), the tiny Qwen2 the project builds, LoRA r=8
alpha 16 dropout 0 on every linear layer, the loss on the assistant's tokens only, conversations packed into
rows of at most `--max-length` tokens (no padding, positions restarting per conversation), a step of at most
max_length × batch_size tokens (ours: sft.batch_tokens = that product, sft.micro_batch_tokens = max_length;
TRL: per_device_train_batch_size = batch_size packed rows), AdamW at a constant 2e-4, float32 on CPU,
`--threads` torch threads each (1 by default: on a machine busy with other work, multi-threaded kernels stall).

Each round runs TRL for `--steps` steps, then ours (the order flips every round); the first `--warmup` steps of
each are not timed. A step's time: between consecutive step ends (TRL: its on_step_end; ours: SFTTrainer.sft_step,
packing included). Tokens: the conversation tokens each side trained that step (no padding on either). Printed:
tokens/s per side (pooled over the timed steps of every round), the ratio ours/TRL (> 1: ours is faster), step
times, and both sides' first and last losses. Also written to bench/results/sft_bench.json.
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
RESULTS = ROOT / "bench" / "results" / "sft_bench.json"
LR = 2e-4


def progress(message: str) -> None:
    print(f"[sft_bench] {message}", file=sys.stderr, flush=True)


def write_data(path: Path, count: int, seed: int) -> None:
    from training.fixtures.tiny_model import synthetic_games

    path.write_text("".join(json.dumps({"messages": g}) + "\n" for g in synthetic_games(count, seed=seed)))


def run_trl(python: str, data: Path, args: argparse.Namespace, seed: int, out: Path) -> dict[str, Any]:
    command = [python, str(ROOT / "bench" / "trl_sft_side.py"), "--model", str(MODEL_DIR), "--data", str(data),
               "--steps", str(args.steps), "--lr", str(LR), "--max-length", str(args.max_length),
               "--batch-size", str(args.batch_size), "--seed", str(seed), "--out", str(out),
               "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    if done.returncode != 0:
        raise SystemExit(f"the TRL side failed:\n{done.stderr[-3000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"')]  # TRL's own logs: dicts
    steps = [r for r in lines if "step" in r]
    losses = next(r["losses"] for r in lines if "losses" in r)
    rows = [{"step": b["step"], "seconds": b["end"] - a["end"], "tokens": b["tokens"] - a["tokens"]}
            for a, b in zip(steps, steps[1:])]
    return {"rows": rows, "losses": losses}


def run_ours(data: Path, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    import torch

    from training.config import LoraConfig
    from training.config.sft import SFTOptions
    from training.sft.data import read_conversations
    from training.sft.packing import plan_run
    from training.sft.trainer import SFTTrainer

    torch.set_num_threads(args.threads)
    options = SFTOptions(batch_tokens=args.max_length * args.batch_size, micro_batch_tokens=args.max_length,
                         learning_rate=LR, warmup_ratio=0.0, schedule="constant")
    trainer = SFTTrainer(str(MODEL_DIR), LoraConfig(r=8, alpha=16, dropout=0.0), options, device="cpu", seed=seed)
    rows = [trainer.encode(c, i) for i, c in enumerate(read_conversations(str(data)))]
    plan = plan_run(rows, epochs=10, batch_tokens=options.batch_tokens, seed=seed, max_steps=args.steps)
    timed, losses = [], []
    last = time.monotonic()
    for k, (_, step_rows) in enumerate(plan.steps):
        metrics = trainer.sft_step(step_rows, LR)
        now = time.monotonic()
        losses.append(metrics["loss"])
        if k:  # step 1's end is the clock's start, as on TRL's side
            timed.append({"step": k + 1, "seconds": now - last, "tokens": metrics["tokens"]})
        last = now
    return {"rows": timed, "losses": losses}


def check_same_rendering() -> None:
    """TRL's side trains on our chat template with generation markers: it must render the same text."""
    from transformers import AutoTokenizer

    from bench.trl_sft_side import MARKED_TEMPLATE
    from training.fixtures.tiny_model import synthetic_games

    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    for conversation in synthetic_games(20, seed=1):
        ours = tokenizer.apply_chat_template(conversation, tokenize=False)
        marked = tokenizer.apply_chat_template(conversation, tokenize=False, chat_template=MARKED_TEMPLATE)
        if ours != marked:
            raise SystemExit("the marked template renders differently from ours: the sides would not train alike")


def timed(rows: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["step"] > warmup + 1]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sft_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=400)
    args = parser.parse_args()
    python = os.environ.get("TRL_PYTHON") or str(ROOT / ".venv-trl" / "bin" / "python")
    if not Path(python).exists():
        raise SystemExit(f"no TRL interpreter at {python}: run `make trl-venv` (or set TRL_PYTHON)")
    from training.fixtures.tiny_model import ensure_tiny_model

    ensure_tiny_model(MODEL_DIR)
    check_same_rendering()
    work = ROOT / "var" / "sft-bench"
    work.mkdir(parents=True, exist_ok=True)
    data = work / "conversations.jsonl"
    write_data(data, args.conversations, seed=5)
    results: dict[str, list[dict[str, Any]]] = {"trl": [], "ours": []}
    for round_ in range(args.rounds):
        order = ["trl", "ours"] if round_ % 2 == 0 else ["ours", "trl"]
        for side in order:
            progress(f"round {round_ + 1}/{args.rounds}: {side}")
            run = run_trl(python, data, args, round_, work / f"trl-{round_}") if side == "trl" \
                else run_ours(data, args, round_)
            results[side].append(run)
    summary: dict[str, Any] = {"settings": vars(args), "lr": LR}
    for side, runs in results.items():
        rows = [r for run in runs for r in timed(run["rows"], args.warmup)]
        seconds, tokens = sum(r["seconds"] for r in rows), sum(r["tokens"] for r in rows)
        summary[side] = {"tokens_per_s": tokens / seconds, "steps": len(rows),
                         "step_s_median": statistics.median(r["seconds"] for r in rows),
                         "tokens_per_step_median": statistics.median(r["tokens"] for r in rows),
                         "tokens_per_s_by_round": [sum(r["tokens"] for r in timed(run["rows"], args.warmup)) /
                                                   sum(r["seconds"] for r in timed(run["rows"], args.warmup))
                                                   for run in runs],
                         "loss_first_mean": statistics.fmean(run["losses"][0] for run in runs),
                         "loss_last_mean": statistics.fmean(run["losses"][-1] for run in runs)}
    summary["ratio_ours_over_trl"] = summary["ours"]["tokens_per_s"] / summary["trl"]["tokens_per_s"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2))
    for side in ("trl", "ours"):
        s = summary[side]
        print(f"{side:>4}: {s['tokens_per_s']:.0f} tokens/s over {s['steps']} timed steps (median step "
              f"{s['step_s_median']:.3f} s, {s['tokens_per_step_median']:.0f} tokens; by round "
              f"{', '.join(f'{x:.0f}' for x in s['tokens_per_s_by_round'])}); loss {s['loss_first_mean']:.3f} -> "
              f"{s['loss_last_mean']:.3f}")
    print(f"tokens/s ours / TRL: {summary['ratio_ours_over_trl']:.2f} (> 1: ours is faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
