"""One check for a GPU machine: does the GRPO step run fast, and does the memory plan hold, on real model sizes?

    python -m bench.gpu_check [--sizes 0.5b,1.5b,7b] [--out bench/results/gpu_check.json]     (`make gpu-check`)

For Qwen2.5-shaped models of 0.5B, 1.5B and 7B parameters with random weights (training/synthetic_model.py; no
download, no network), bf16, LoRA r=16 on every linear layer, gradient checkpointing and the run's default token
budget (grpo.micro_batch_tokens), each: the GRPO step's tokens/s (our Trainer.train_step, one warm-up, median
of 3), MFU against this card's bf16 peak measured here (a large matmul), the trainer's peak memory against the
memory plan's estimate (training/memory_plan.py), and the local server's sampling tokens/s on the GPU
(training/servers/engine.py, 32 sequences of 128 tokens). Writes one JSON file and prints a table for
docs/gpu.md. Needs torch, transformers and peft with the engine (`pip install -e .`); no vLLM, no Django.
About 5-8 minutes on one H100. Without CUDA it prints one line saying it skipped and exits 0; `--device cpu
--sizes tiny` runs the same code path on a CPU in a minute (a smoke test; its numbers mean nothing).

MFU counts 4 x parameters FLOPs per processed token (forward 2N, backward 2N for the input gradients: frozen
weights get no weight gradient); checkpointing's recomputation and attention are not counted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 3
SAMPLES, SAMPLE_TOKENS = 32, 128
BUDGET_S = 8 * 60  # the whole check; sizes not started by then are reported as skipped


def bf16_peak_flops(device: str) -> float:
    """The card's dense bf16 matmul rate, measured: the MFU denominator."""
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


def run_config(model_dir: Path, device: str) -> Any:
    """The run's settings: LoRA r16 (alpha 32) on all linear layers, the default token budget, bf16 with
    checkpointing (float32 for a CPU smoke test, where bf16 kernels are slow)."""
    from training.config import parse_run_config

    return parse_run_config({
        "base_model": str(model_dir), "scenarios": [{"id": "a", "user_message": "hi"}],
        "lora": {"r": 16, "alpha": 32}, "server": {"kind": "local", "max_lora_rank": 16},
        "grpo": {"group_size": 8, "groups_per_step": 4, "learning_rate": 1e-5},
        "trainer": {"dtype": "bfloat16" if device.startswith("cuda") else "float32", "gradient_checkpointing": True}})


def train_step(model_dir: Path, device: str) -> dict[str, Any]:
    import torch

    from training.memory_plan import plan_memory, read_shape
    from training.synthetic_model import synthetic_groups
    from training.trainer import Trainer

    config = run_config(model_dir, device)
    groups = synthetic_groups(config.grpo.groups_per_step, config.grpo.group_size, reply_words=150)
    trainer = Trainer(str(model_dir), config.lora, config.grpo, device=device, options=config.trainer)
    rows = trainer._rows(groups)
    processed = sum(len(r.input_ids) for r in rows)
    params = sum(p.numel() for p in trainer.model.parameters())
    trainer.train_step(groups)  # warm-up
    sync(device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        trainer.train_step(groups)
        sync(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    plan = plan_memory(config.model_copy(update={"device": device}), read_shape(str(model_dir)), None).gpus[0].trainer
    estimate = plan.weights + plan.lora_state + plan.activations  # what the allocator holds (no CUDA context)
    del trainer
    if cuda:
        torch.cuda.empty_cache()
    return {"params": params, "tokens": processed, "step_s": seconds, "tokens_per_s": processed / seconds,
            "model_flops": 4 * params * processed, "peak_bytes": peak, "plan_bytes": estimate,
            "plan_over_measured": estimate / peak if peak else None}


def sampling(model_dir: Path, device: str) -> dict[str, Any]:
    from training.servers.engine import Engine

    engine = Engine(str(model_dir), "base", 16, device)
    body = {"model": "base", "messages": [{"role": "user", "content": "Play 2048."}], "n": SAMPLES,
            "max_tokens": SAMPLE_TOKENS, "ignore_eos": True, "temperature": 1.0, "seed": 0}
    try:
        engine.chat({**body, "n": 2, "max_tokens": 8})  # warm-up
        start = time.perf_counter()
        reply = engine.chat(body)
        seconds = time.perf_counter() - start
    finally:
        engine.stop()
    tokens = reply["usage"]["completion_tokens"]
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def check_size(size: str, device: str, peak_flops: float) -> dict[str, Any]:
    from training.synthetic_model import build_synthetic_model

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{size}-") as tmp:
        model_dir = build_synthetic_model(tmp, size)
        step = train_step(model_dir, device)
        sample = sampling(model_dir, device)
    step["mfu"] = step["model_flops"] / step["step_s"] / peak_flops
    return {"size": size, **step, "sampling_tokens_per_s": sample["tokens_per_s"], "sampling": sample,
            "seconds": time.perf_counter() - started}


def table(results: dict[str, Any]) -> str:
    lines = [f"card: {results['card']}, bf16 peak measured {results['bf16_peak_tflops']:.0f} TFLOP/s, "
             f"{results['date']}",
             "| model | params | step tokens | step tokens/s | MFU | peak memory | plan | plan/peak | sampling tokens/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["sizes"]:
        if "skipped" in r:
            lines.append(f"| {r['size']} | skipped: {r['skipped']} |||||||| ")
            continue
        ratio = f"{r['plan_over_measured']:.2f}" if r["plan_over_measured"] else "n/a"
        lines.append(f"| {r['size']} | {r['params'] / 1e9:.2f}B | {r['tokens']} | {r['tokens_per_s']:.0f} | "
                     f"{r['mfu']:.1%} | {r['peak_bytes'] / 2**30:.1f} GiB | {r['plan_bytes'] / 2**30:.1f} GiB | "
                     f"{ratio} | {r['sampling_tokens_per_s']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.5b,1.5b,7b")
    parser.add_argument("--device", default="cuda", help="cuda (default); cpu only for a smoke test with 'tiny'")
    parser.add_argument("--out", default="bench/results/gpu_check.json")
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu-check skipped: no CUDA device visible (torch.cuda.is_available() is False); nothing measured")
        return 0
    started = time.perf_counter()
    card = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    peak = bf16_peak_flops(args.device)
    results: dict[str, Any] = {"card": card, "bf16_peak_tflops": peak / 1e12, "torch": torch.__version__,
                               "date": time.strftime("%Y-%m-%d"), "sizes": []}
    print(f"gpu-check on {card}: bf16 peak {peak / 1e12:.0f} TFLOP/s (measured)", flush=True)
    for size in args.sizes.split(","):
        if time.perf_counter() - started > BUDGET_S:
            results["sizes"].append({"size": size, "skipped": f"the {BUDGET_S // 60}-minute budget was spent"})
            continue
        try:
            result = check_size(size, args.device, peak)
        except torch.OutOfMemoryError as err:
            result = {"size": size, "skipped": f"out of memory: {str(err).splitlines()[0][:160]}"}
            torch.cuda.empty_cache()
        results["sizes"].append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "sampling"}), flush=True)
    results["seconds"] = time.perf_counter() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
