"""One check for a GPU machine: does the GRPO step run fast, and does the memory plan hold, on real model sizes?

    python -m bench.gpu_check [--sizes 0.5b,1.5b,7b] [--write-docs] [--step]     (`make gpu-check`)
    python -m bench.gpu_check --quick                     (CPU smoke test at a tiny size; its numbers mean nothing)

For Qwen2.5-shaped models of 0.5B, 1.5B and 7B parameters with random weights (training/fixtures/synthetic_model.py; no
download, no network), bf16, LoRA r=16 on every linear layer, gradient checkpointing and the run's default token
budget (grpo.micro_batch_tokens), each:
- the GRPO step's tokens/s (our Trainer.train_step, one warm-up, median of 3) on micro-batches that fill the
  budget: every sequence is cut to budget / micro_batch_size tokens, so each pass holds exactly what the memory
  plan assumes;
- MFU: the step's model FLOPs (bench/gpu_flops.py: the trained positions' output layer, not every token's) over
  the card's dense bf16 peak from its datasheet, and over a matmul measured here as a second column;
- the trainer's peak allocated memory against the plan's estimate (training/model/gpu/memory_plan.py), goal within 15 %;
- the local server's sampling tokens/s (training/servers/engine.py): 32 unseeded sequences of 128 tokens, sampled
  together in one batch (seeded ones would be sampled one at a time).
`--step` adds one real GRPO step with the local server on CUDA (bench/gpu_step.py): each stage's time and the
GPU's idle share. Writes one JSON file, prints a table, and with --write-docs puts it into docs/gpu.md between
its gpu-check markers. Needs torch, transformers and peft with the engine; no vLLM, no Django. Sizes whose
estimated time no longer fits the 8-minute budget are reported as skipped. Without CUDA it prints one line
saying it skipped and exits 0.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_flops import card_peak, step_flops

BUDGET_S = 8 * 60  # the whole check on one H100
# Seconds per size on one H100, estimated from the model's size: build and save the random model, load it,
# a warm-up and 3 timed steps, sampling. A size is started only while its estimate fits what is left.
ESTIMATE_S = {"tiny": 15, "0.5b": 45, "1.5b": 75, "7b": 210}
STEP_ESTIMATE_S = 90  # --step: two end-to-end steps on the 0.5B model, its server's start included
DOCS = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"
BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"


@dataclass(frozen=True)
class Settings:
    device: str
    budget_tokens: int  # grpo.micro_batch_tokens
    rows: int  # grpo.micro_batch_size: the sequences of one micro-batch
    reply_words: int  # long enough that every sequence reaches budget / rows tokens before it is cut
    rounds: int
    samples: int
    sample_tokens: int
    groups: tuple[int, int] = (4, 8)  # groups per step, group size: 32 sequences, 4 full micro-batches


FULL = Settings("cuda", 8192, 8, 600, 3, 32, 128)
QUICK = Settings("cpu", 512, 2, 60, 1, 4, 8, (1, 4))  # 256 tokens a sequence: past the 175-token prompt


def progress(started: float, message: str) -> None:
    print(f"[gpu-check +{time.perf_counter() - started:.0f}s] {message}", flush=True)


def bf16_peak_flops(device: str) -> float:
    """A large bf16 matmul's rate, measured here: the second MFU column's denominator (the first is the datasheet's)."""
    import torch

    n = 8192 if device.startswith("cuda") else 512
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    start, rounds = time.perf_counter(), 20
    for _ in range(rounds):
        a @ b
    sync(device)
    return 2 * n**3 * rounds / (time.perf_counter() - start)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_config(model_dir: Path, s: Settings) -> Any:
    """The run's settings: LoRA r16 (alpha 32) on all linear layers, the token budget, bf16 with checkpointing
    (float32 for a CPU smoke test, where bf16 kernels are slow)."""
    from training.config import parse_run_config

    return parse_run_config({
        "base_model": str(model_dir), "scenarios": [{"id": "a", "user_message": "hi"}],
        "lora": {"r": 16, "alpha": 32}, "server": {"kind": "local", "max_lora_rank": 16},
        "grpo": {"groups_per_step": s.groups[0], "group_size": s.groups[1], "learning_rate": 1e-5,
                 "micro_batch_tokens": s.budget_tokens, "micro_batch_size": s.rows},
        "trainer": {"dtype": "bfloat16" if s.device.startswith("cuda") else "float32",
                    "gradient_checkpointing": True}})


def train_step(model_dir: Path, s: Settings, peaks: dict[str, float | None]) -> dict[str, Any]:
    import torch

    from training.model.batching import micro_batches
    from training.model.gpu.memory_plan import plan_memory, read_shape
    from training.fixtures.synthetic_model import synthetic_groups
    from training.rl.trainer import Trainer

    config = run_config(model_dir, s)
    groups = synthetic_groups(config.grpo.groups_per_step, config.grpo.group_size, reply_words=s.reply_words)
    trainer = Trainer(str(model_dir), config.lora, config.grpo, device=s.device, options=config.trainer)
    # Every sequence cut to the same width, so each micro-batch is `rows` sequences x width = the token budget:
    # what the plan assumes (sequences of mixed lengths filled 45-80 % of it).
    width = s.budget_tokens // s.rows
    trainer.max_length = min(width, min(len(r.input_ids) for r in trainer._rows(groups)))
    rows = trainer._rows(groups)
    micro = micro_batches(rows, max_tokens=config.grpo.micro_batch_tokens, max_rows=config.grpo.micro_batch_size)
    filled = max(len(mb) * max(len(r.input_ids) for r in mb) for mb in micro)
    shape = read_shape(str(model_dir))
    flops = step_flops(shape, rows, lora_r=config.lora.r, lora_targets=config.lora.target_modules)
    params = sum(p.numel() for p in trainer.model.parameters())
    trainer.train_step(groups)  # warm-up
    sync(s.device)
    cuda = s.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(s.rounds):
        start = time.perf_counter()
        trainer.train_step(groups)
        sync(s.device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    plan = plan_memory(config.model_copy(update={"device": s.device}), shape, None).gpus[0].trainer
    estimate = plan.weights + plan.lora_state + plan.activations  # what the allocator holds (no CUDA context)
    del trainer
    if cuda:
        torch.cuda.empty_cache()
    rate = flops["total"] / seconds
    return {"params": params, "tokens": int(flops["tokens"]), "trained_tokens": int(flops["trained_tokens"]),
            "micro_batches": len(micro), "micro_batch_tokens": filled, "budget_fill": filled / s.budget_tokens,
            "step_s": seconds, "tokens_per_s": flops["tokens"] / seconds, "flops": flops,
            "mfu": rate / peaks["card"] if peaks["card"] else None, "mfu_matmul": rate / peaks["matmul"],
            "peak_bytes": peak, "plan_bytes": estimate, "plan_over_measured": estimate / peak if peak else None}


def sampling(model_dir: Path, s: Settings) -> dict[str, Any]:
    from training.servers.engine import Engine

    engine = Engine(str(model_dir), "base", 16, s.device)
    # No seed: unseeded choices join one batch; a seeded request's choices are sampled one at a time.
    body = {"model": "base", "messages": [{"role": "user", "content": "Play 2048."}], "n": s.samples,
            "max_tokens": s.sample_tokens, "ignore_eos": True, "temperature": 1.0}
    batches: list[int] = []
    sample = engine._sample  # counted, not changed: the table shows the choices were sampled together
    engine._sample = lambda batch: (batches.append(len(batch)), sample(batch))[1]  # type: ignore[method-assign]
    try:
        engine.chat({**body, "n": 2, "max_tokens": 4})  # warm-up
        batches.clear()
        start = time.perf_counter()
        reply = engine.chat(body)
        seconds = time.perf_counter() - start
    finally:
        engine.stop()
    tokens = reply["usage"]["completion_tokens"]
    return {"tokens": tokens, "sequences": len(reply["choices"]), "batches": batches, "seconds": seconds,
            "tokens_per_s": tokens / seconds}


def check_size(size: str, s: Settings, peaks: dict[str, float | None], started: float) -> dict[str, Any]:
    from training.fixtures.synthetic_model import build_synthetic_model

    begun = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{size}-") as tmp:
        progress(started, f"{size}: building the random model (estimate for the size {ESTIMATE_S.get(size, 60)} s)")
        model_dir = build_synthetic_model(tmp, size)
        progress(started, f"{size}: training steps (1 warm-up, {s.rounds} timed)")
        step = train_step(model_dir, s, peaks)
        progress(started, f"{size}: sampling {s.samples} x {s.sample_tokens} tokens")
        sample = sampling(model_dir, s)
    return {"size": size, **step, "sampling_tokens_per_s": sample["tokens_per_s"], "sampling": sample,
            "seconds": time.perf_counter() - begun}


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def table(results: dict[str, Any]) -> str:
    card = results["card"]
    peak = f"dense bf16 peak {results['card_peak_tflops']:.0f} TFLOP/s (datasheet)" if results.get(
        "card_peak_tflops") else "not in the table of known cards: MFU against the measured matmul only"
    lines = [f"card: {card}, {peak}; matmul measured {results['bf16_peak_tflops']:.1f} TFLOP/s; "
             f"{results['date']}, {results.get('seconds', 0):.0f} s in all",
             "",
             "| model | params | micro-batch tokens (fill) | step tokens/s | MFU (card peak) | MFU (measured matmul) "
             "| peak memory | plan | plan/peak | within 15 % | sampling tokens/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["sizes"]:
        if "skipped" in r:
            lines.append(f"| {r['size']} | skipped: {r['skipped']} ||||||||||")
            continue
        ratio = r["plan_over_measured"]
        within = "n/a" if ratio is None else ("yes" if abs(ratio - 1) <= 0.15 else "no")
        lines.append(
            f"| {r['size']} | {r['params'] / 1e9:.2f}B | {r['micro_batch_tokens']} ({r['budget_fill']:.0%}) | "
            f"{r['tokens_per_s']:.0f} | {pct(r['mfu'])} | {pct(r['mfu_matmul'])} | {r['peak_bytes'] / 2**30:.1f} GiB "
            f"| {r['plan_bytes'] / 2**30:.1f} GiB | {'n/a' if ratio is None else f'{ratio:.2f}'} | {within} | "
            f"{r['sampling_tokens_per_s']:.0f} |")
    if results.get("step"):
        from bench.gpu_step import step_table

        lines += ["", step_table(results["step"])]
    elif results.get("step_skipped"):
        lines += ["", f"end-to-end GRPO step skipped: {results['step_skipped']}"]
    return "\n".join(lines)


def write_docs(text: str, path: Path = DOCS) -> None:
    """The table replaces what stands between the gpu-check markers of docs/gpu.md."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} markers to write the table between")
    head, rest = doc.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help="default 0.5b,1.5b,7b (tiny with --quick)")
    parser.add_argument("--quick", action="store_true", help="CPU smoke test: the tiny model, a small budget")
    parser.add_argument("--step", action="store_true", help="add one end-to-end GRPO step (bench/gpu_step.py)")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/gpu.md")
    parser.add_argument("--out", default="bench/results/gpu_check.json")
    parser.add_argument("--docs", default=str(DOCS), help="the markdown file --write-docs writes into")
    args = parser.parse_args(argv)
    import torch

    s = QUICK if args.quick else FULL
    sizes = (args.sizes or ("tiny" if args.quick else "0.5b,1.5b,7b")).split(",")
    if s.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu-check skipped: no CUDA device visible (torch.cuda.is_available() is False); nothing measured")
        return 0
    started = time.perf_counter()
    name = torch.cuda.get_device_name() if s.device.startswith("cuda") else "cpu"
    card, card_flops = card_peak(name)
    matmul = bf16_peak_flops(s.device)
    peaks = {"card": card_flops, "matmul": matmul}
    results: dict[str, Any] = {"card": card, "device_name": name, "bf16_peak_tflops": matmul / 1e12,
                               "card_peak_tflops": card_flops / 1e12 if card_flops else None,
                               "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "sizes": []}
    progress(started, f"on {name}: card peak {results['card_peak_tflops'] or 'unknown'} TFLOP/s, matmul "
                      f"{matmul / 1e12:.0f} TFLOP/s measured; budget {BUDGET_S} s")
    reserve = STEP_ESTIMATE_S if args.step else 0
    for size in sizes:
        left = BUDGET_S - reserve - (time.perf_counter() - started)
        if not args.quick and ESTIMATE_S.get(size, 60) > left:
            results["sizes"].append({"size": size, "skipped": f"its estimate ({ESTIMATE_S.get(size, 60)} s) "
                                                              f"exceeds the {left:.0f} s left of the budget"})
            continue
        try:
            result = check_size(size, s, peaks, started)
        except torch.OutOfMemoryError as err:
            result = {"size": size, "skipped": f"out of memory: {str(err).splitlines()[0][:160]}"}
            torch.cuda.empty_cache()
        results["sizes"].append(result)
        progress(started, json.dumps({k: v for k, v in result.items() if k not in ("sampling", "flops")}))
    left = BUDGET_S - (time.perf_counter() - started)
    if args.step and not args.quick and left < STEP_ESTIMATE_S:
        results["step_skipped"] = f"its estimate ({STEP_ESTIMATE_S} s) exceeds the {left:.0f} s left of the budget"
        progress(started, f"end-to-end step skipped: {results['step_skipped']}")
    elif args.step:
        from bench.gpu_step import end_to_end_step

        progress(started, f"end-to-end GRPO step (estimate {STEP_ESTIMATE_S} s)")
        results["step"] = end_to_end_step(quick=args.quick)
    results["seconds"] = time.perf_counter() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    text = table(results)
    print(text)
    print(f"written: {out}")
    if args.write_docs:
        write_docs(text, Path(args.docs))
        print(f"written: the table in {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
