"""GPU benchmark of the GRPO optimisation step: tokens/s, peak memory and MFU, against plain transformers + peft.

    python -m bench.gpu_bench        (`make bench-gpu`; prints one skip line and exits 0 without CUDA)

For Qwen2-architecture models of 0.5B and 1.5B parameters with random weights (training.fixtures.synthetic_model),
bf16 with gradient checkpointing, LoRA r=16 on every projection: a fixed batch of 32 conversations (4 groups
of 8, replies stretched by 150 words). Our `Trainer.train_step` (one warm-up, median of 3) against a plain loop
on the same padded batch: peft model, `model(input_ids, attention_mask).logits`, token-weighted policy-gradient loss over
the assistant tokens from a full-vocabulary log_softmax, backward, AdamW step, same micro-batches by count.
MFU = model FLOPs / time / 798e12 (H100 bf16 dense peak, as the issue fixes it). Model FLOPs per processed
token = 4 × parameters (forward 2N, backward 2N for the input gradients: frozen weights get no weight
gradient); checkpointing's recomputation and attention FLOPs are not counted, so MFU here is conservative.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from typing import Any

PEAK_FLOPS = 798e12
SIZES = ("0.5b", "1.5b")
ROUNDS = 3


def plain_step(model: Any, optimizer: Any, batches: list[tuple[Any, Any, Any, Any]], total: float) -> None:
    import torch

    optimizer.zero_grad()
    for input_ids, mask, attention, advantages in batches:
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        loss = -(torch.exp(lp - lp.detach()) * advantages[:, None] * mask[:, 1:]).sum() / total
        loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()


def timed(fn: Any, device: str) -> tuple[float, int]:
    import torch

    cuda = device.startswith("cuda")
    fn()  # warm-up
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), torch.cuda.max_memory_allocated() if cuda else 0


def bench_size(size: str, device: str = "cuda") -> dict[str, Any]:
    """One model size; `device="cpu"` with size "tiny" is a quick smoke of the code path without a GPU."""
    import torch
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from training.config import GRPOConfig, LoraConfig, TrainerConfig
    from training.fixtures.synthetic_model import build_synthetic_model, synthetic_groups
    from training.rl.trainer import Trainer

    path = build_synthetic_model(tempfile.mkdtemp(prefix=f"gpu-bench-{size}-"), size)
    groups = synthetic_groups(4, 8, reply_words=150)
    grpo = GRPOConfig(micro_batch_size=8, micro_batch_tokens=16384, learning_rate=1e-5)
    trainer = Trainer(str(path), LoraConfig(r=16, alpha=32), grpo, device=device,
                      options=TrainerConfig(dtype="bfloat16", gradient_checkpointing=True))
    rows = trainer._rows(groups)
    processed = sum(len(r.input_ids) for r in rows)
    params = sum(p.numel() for p in trainer.model.parameters())
    ours_s, ours_peak = timed(lambda: trainer.train_step(groups), device)
    del trainer
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    base = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16, attn_implementation="sdpa").to(device)
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(base, PeftLoraConfig(r=16, lora_alpha=32, target_modules=LoraConfig().target_modules,
                                                task_type="CAUSAL_LM"))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    from training.sft.whole_model import pad_batch

    batches = []
    for i in range(0, len(rows), grpo.micro_batch_size):
        chunk = rows[i: i + grpo.micro_batch_size]
        ids, mask, attention = pad_batch([(r.input_ids, r.mask) for r in chunk], 0)
        advantages = torch.tensor([r.advantage for r in chunk])
        batches.append(tuple(t.to(device) for t in (ids, mask, attention, advantages)))
    total = float(sum(r.trained_tokens for r in rows))
    plain_s, plain_peak = timed(lambda: plain_step(model, optimizer, batches, total), device)
    flops = 4 * params * processed
    return {"size": size, "params": params, "tokens": processed,
            "ours": {"seconds": ours_s, "tokens_per_s": processed / ours_s, "peak_gib": ours_peak / 2**30,
                     "mfu": flops / ours_s / PEAK_FLOPS},
            "plain": {"seconds": plain_s, "tokens_per_s": processed / plain_s, "peak_gib": plain_peak / 2**30,
                      "mfu": flops / plain_s / PEAK_FLOPS},
            "speedup": plain_s / ours_s}


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        print("bench-gpu skipped: no CUDA device visible (torch.cuda.is_available() is False)")
        return
    print(f"device: {torch.cuda.get_device_name()}  (MFU denominator {PEAK_FLOPS / 1e12:.0f} TFLOP/s bf16)")
    print(f"{'model':>6} {'params':>8} {'tokens':>7} | {'ours tok/s':>10} {'peak GiB':>8} {'MFU':>6} | "
          f"{'plain tok/s':>11} {'peak GiB':>8} {'MFU':>6} | ours/plain")
    for size in SIZES:
        r = bench_size(size)
        o, p = r["ours"], r["plain"]
        print(f"{size:>6} {r['params'] / 1e9:>7.2f}B {r['tokens']:>7} | {o['tokens_per_s']:>10.0f} "
              f"{o['peak_gib']:>8.2f} {o['mfu']:>6.1%} | {p['tokens_per_s']:>11.0f} {p['peak_gib']:>8.2f} "
              f"{p['mfu']:>6.1%} | {r['speedup']:.2f}x", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
