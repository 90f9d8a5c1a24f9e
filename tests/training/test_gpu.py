"""The trainer on a CUDA device (`make test-gpu`): bf16, gradient checkpointing, memory within the token budget.

Every test here is marked `gpu` (deselected by plain `make test`) and skips, with the reason, without CUDA.
"""
from __future__ import annotations

import pytest
import torch

from training.config import GRPOConfig, LoraConfig, TrainerConfig
from training.fixtures.synthetic_model import build_synthetic_model, synthetic_groups
from training.model.adapter import step_memory_bytes
from training.rl.trainer import Trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU trainer tests need one"),
]


@pytest.fixture(scope="module")
def half_b(tmp_path_factory):
    return build_synthetic_model(tmp_path_factory.mktemp("qwen2-0.5b"), "0.5b")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return build_synthetic_model(tmp_path_factory.mktemp("qwen2-tiny"), "tiny")


def test_bf16_steps_with_checkpointing_stay_within_the_token_budget(half_b):
    budget = 4096
    options = TrainerConfig(dtype="auto", gradient_checkpointing=True)
    grpo = GRPOConfig(micro_batch_tokens=budget, micro_batch_size=64, learning_rate=1e-5)
    trainer = Trainer(str(half_b), LoraConfig(r=16, alpha=32), grpo, device="cuda", options=options)
    assert next(trainer.model.get_base_model().parameters()).dtype == torch.bfloat16
    resident = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    data = synthetic_groups(4, 8, reply_words=150)
    first, second = trainer.train_step(data), trainer.train_step(data)
    peak = torch.cuda.max_memory_allocated()
    assert first["tokens"] > budget  # several micro-batches
    assert all(m["loss"] is not None and torch.isfinite(torch.tensor(m["loss"])) for m in (first, second))
    optimizer_state = 3 * sum(p.numel() * 4 for p in trainer.model.parameters() if p.requires_grad)
    allowed = step_memory_bytes(trainer.model.config, tokens=budget, dtype=torch.bfloat16, checkpointing=True,
                                chunk_tokens=options.logprob_chunk_tokens) + optimizer_state
    print(f"peak {peak / 2**30:.2f} GiB, weights {resident / 2**30:.2f} GiB, step allowance {allowed / 2**30:.2f} GiB")
    assert peak - resident <= allowed


def test_bf16_loss_and_gradients_agree_with_float32(small):
    results = {}
    for dtype in ("float32", "bfloat16"):
        trainer = Trainer(str(small), LoraConfig(), GRPOConfig(learning_rate=1e-5, beta=0.1), device="cuda", seed=3,
                          options=TrainerConfig(dtype=dtype, gradient_checkpointing=True))
        with torch.no_grad():  # LoRA B starts at zero: move it so A gets gradients and the KL term is not zero
            for name, p in trainer.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
        metrics = trainer.train_step(synthetic_groups(2, 4, reply_words=40, seed=1))
        grads = torch.cat([p.grad.float().flatten() for p in trainer.model.parameters() if p.requires_grad])
        results[dtype] = (metrics["loss"], grads)
    (loss32, g32), (loss16, g16) = results["float32"], results["bfloat16"]
    assert loss16 == pytest.approx(loss32, rel=0.05, abs=1e-3)  # surrogate + beta × KL, which depends on the weights
    cosine = torch.nn.functional.cosine_similarity(g32, g16, dim=0).item()
    assert cosine > 0.98, cosine


def test_the_local_servers_engine_samples_on_cuda(small):
    # The engine's sampling bookkeeping (ids, masks, stop tokens, the seeded generator) lived on the CPU while the
    # model sat on CUDA: every rollout of a local server with --device cuda answered 500 (index on cpu).
    from training.servers.engine import Engine

    engine = Engine(str(small), "tiny", 8, "cuda")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6,
            "temperature": 1.0, "return_token_ids": True}
    try:
        once, again = (engine.chat({**body, "seed": 7}) for _ in range(2))
        batch = engine.chat({**body, "n": 3})
    finally:
        engine.stop()
    (sampled,) = [c["token_ids"] for c in once["choices"]]
    assert 1 <= len(sampled) <= 6
    assert again["choices"][0]["token_ids"] == sampled  # seeded on the device's own generator
    assert len(batch["choices"]) == 3 and all(1 <= len(c["token_ids"]) <= 6 for c in batch["choices"])
