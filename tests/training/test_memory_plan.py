"""The memory plan (training/model/gpu/memory_plan.py) against numbers worked out by hand for the published shapes of
Qwen2.5 0.5B, 1.5B and 7B, and `server.gpu_sharing: auto` choosing none, split or sleep on machines of given
sizes (training/model/gpu/sharing.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.config import parse_run_config
from training.model.gpu.memory_plan import (GiB, ModelShape, SERVER_OVERHEAD, SLEEPING_SERVER, TRAINER_OVERHEAD,
                                            plan_memory, read_shape)
from training.model.gpu.sharing import GpuMemory, check_trainer_fits, resolve_sharing
from training.types import TrainingError

# config.json fields of the three models as published.
QWEN = {
    "0.5b": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
             "max_position_embeddings": 32768},
    "1.5b": {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
             "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
             "max_position_embeddings": 32768},
    "7b": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
           "max_position_embeddings": 32768},
}

# Worked by hand, layer by layer: q, k, v, o, gate, up, down weights + q/k/v biases + 2 norms per layer, then
# the embeddings (twice when untied) and the final norm. They match the published 0.49B, 1.54B and 7.62B.
PARAMS = {
    "0.5b": 24 * (896 * 896 + 2 * 896 * 128 + 896 * 896 + 3 * 896 * 4864 + (896 + 2 * 128) + 2 * 896)
    + 151936 * 896 + 896,  # = 494_032_768
    "1.5b": 28 * (1536 * 1536 + 2 * 1536 * 256 + 1536 * 1536 + 3 * 1536 * 8960 + (1536 + 2 * 256) + 2 * 1536)
    + 151936 * 1536 + 1536,  # = 1_543_714_304
    "7b": 28 * (3584 * 3584 + 2 * 3584 * 512 + 3584 * 3584 + 3 * 3584 * 18944 + (3584 + 2 * 512) + 2 * 3584)
    + 2 * 152064 * 3584 + 3584,  # = 7_615_616_512
}
# LoRA r=16 on all seven projections: r x (in + out) each, per layer.
LORA_R16 = {
    "0.5b": 24 * 16 * (2 * (896 + 896) + 2 * (896 + 128) + 3 * (896 + 4864)),
    "1.5b": 28 * 16 * (2 * (1536 + 1536) + 2 * (1536 + 256) + 3 * (1536 + 8960)),
    "7b": 28 * 16 * (2 * (3584 + 3584) + 2 * (3584 + 512) + 3 * (3584 + 18944)),
}
HIDDEN_LAYERS_VOCAB = {"0.5b": (896, 24, 151936), "1.5b": (1536, 28, 151936), "7b": (3584, 28, 152064)}
# Keys and values, layers x kv heads x head dim, bf16.
KV_PER_TOKEN = {"0.5b": 2 * 24 * 2 * 64 * 2, "1.5b": 2 * 28 * 2 * 128 * 2, "7b": 2 * 28 * 4 * 128 * 2}


def model_dir(tmp_path: Path, size: str) -> Path:
    d = tmp_path / f"qwen2.5-{size}"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(QWEN[size]))
    return d


def run_config(base: Path, *, server: dict | None = None, trainer: dict | None = None, **parts: object):
    return parse_run_config({
        "base_model": str(base), "scenarios": [{"id": "a", "user_message": "hi"}],
        "lora": {"r": 16}, "grpo": {"group_size": 8, "groups_per_step": 4, "micro_batch_tokens": 8192},
        "trainer": {"gradient_checkpointing": True, "dtype": "bfloat16", **(trainer or {})},
        "server": {"kind": "vllm", "max_lora_rank": 16, **(server or {})}, **parts})


@pytest.mark.parametrize("size", ["0.5b", "1.5b", "7b"])
def test_the_plan_counts_weights_adapter_activations_and_kv_cache_as_worked_by_hand(tmp_path, size):
    assert PARAMS == {"0.5b": 494_032_768, "1.5b": 1_543_714_304, "7b": 7_615_616_512}
    shape = read_shape(str(model_dir(tmp_path, size)))
    assert shape.params() == PARAMS[size]
    plan = plan_memory(run_config(model_dir(tmp_path, size)), shape, [80 * GiB])
    (gpu,) = plan.gpus
    hidden, layers, vocab = HIDDEN_LAYERS_VOCAB[size]
    assert gpu.trainer.weights == PARAMS[size] * 2  # bf16
    assert gpu.trainer.lora_state == LORA_R16[size] * (4 + 4 + 8)  # fp32 weight, gradient, two Adam moments
    # Checkpointed, as the activation probe measured it: each layer keeps its bf16 input for 8192 tokens (plus the
    # body's own few hidden-sized tensors); the log-prob chunk's backward holds four float32 copies of its 1024 x
    # vocab logits; that chunk's peak and the recomputed layer's never coexist, so only the larger is added.
    terms = gpu.trainer.activation_terms
    assert terms.measured
    assert 8192 * hidden * 2 * layers < terms.kept < 8192 * hidden * 2 * layers * 1.15
    assert terms.logits_peak == pytest.approx(1024 * vocab * 4 * 4, rel=0.02)
    assert gpu.trainer.activations == terms.kept + max(terms.layer_peak, terms.logits_peak)
    # vLLM: bf16 weights, and KV for one step's 32 rollouts of 4096 tokens (no max_model_len set).
    assert gpu.server.weights == PARAMS[size] * 2
    assert gpu.server.kv_tokens == 32 * 4096
    assert gpu.server.kv_cache == 32 * 4096 * KV_PER_TOKEN[size]
    split = gpu.trainer.peak + gpu.server.total
    assert gpu.need == split == (PARAMS[size] * 4 + LORA_R16[size] * 16 + gpu.trainer.activations
                                 + 32 * 4096 * KV_PER_TOKEN[size] + TRAINER_OVERHEAD + SERVER_OVERHEAD)
    assert plan.sharing == "split" and plan.fits
    assert plan.gpu_memory_utilization == pytest.approx(-(-gpu.server.total * 100 // (80 * GiB)) / 100)


def test_the_7b_numbers_in_gib_read_as_a_person_would_check_them(tmp_path):
    lines = plan_memory(run_config(model_dir(tmp_path, "7b")), read_shape(str(model_dir(tmp_path, "7b"))),
                        [80 * GiB]).lines()
    # 7.6e9 x 2 bytes = 14.2 GiB; 131072 tokens x 56 KiB = 7.0 GiB.
    assert "trainer: weights 14.2 GiB" in lines[3] and "vLLM: weights 14.2 GiB, KV cache 7.0 GiB" in lines[4]
    assert lines[-1].startswith("verdict: fits, with")


def test_without_checkpointing_every_layer_keeps_its_activations(tmp_path):
    base = model_dir(tmp_path, "0.5b")
    plan = plan_memory(run_config(base, trainer={"gradient_checkpointing": False}), read_shape(str(base)), [80 * GiB])
    terms = plan.gpus[0].trainer.activation_terms
    # Autograd keeps about 90 bytes x hidden per token in each Qwen2 layer with LoRA on every projection (peft's
    # float32 copies of each adapter's input, SwiGLU's intermediates): not the 34 once assumed.
    assert 80 <= terms.kept / (8192 * 24 * 896) <= 110
    assert plan.gpus[0].trainer.activations == terms.kept + max(terms.layer_peak, terms.logits_peak)


def test_fsdp_shards_the_trainers_weights_over_its_processes(tmp_path):
    base = model_dir(tmp_path, "7b")
    plan = plan_memory(run_config(base, trainer={"distributed": "fsdp", "processes": 4}), read_shape(str(base)),
                       [80 * GiB] * 8)
    layer = (PARAMS["7b"] - 152064 * 3584) // 28 * 2  # one layer gathered whole at a time
    assert {g.trainer.weights for g in plan.gpus if g.trainer} == {PARAMS["7b"] * 2 // 4 + layer}
    assert plan.trainer_gpus == [0, 1, 2, 3] and plan.server_gpus == [4] and plan.sharing == "none"


def reading(*gib: float) -> list[GpuMemory]:
    return [GpuMemory(i, "test GPU", int(g * GiB), int(g * GiB)) for i, g in enumerate(gib)]


@pytest.mark.parametrize("gpus, sharing, server_gpus", [
    (reading(80), "split", [0]),  # 7B: 22 + 23 GiB side by side on one 80 GiB card
    (reading(40), "sleep", [0]),  # not side by side (45 GiB), but taking turns (39 GiB)
    (reading(80, 80), "none", [1]),  # vLLM on the second GPU, the trainer on the first
    (reading(*[80] * 8), "none", [1]),
])
def test_auto_chooses_split_sleep_or_none_from_the_plan(tmp_path, gpus, sharing, server_gpus):
    config, plan = resolve_sharing(run_config(model_dir(tmp_path, "7b")), gpus)
    assert plan.sharing == config.server.gpu_sharing == sharing
    assert plan.fits
    if len(gpus) > 1:  # told which GPU, else vLLM would take the first visible one, the trainer's
        assert config.server.gpus == server_gpus
    if sharing != "none":
        assert config.server.gpu_memory_utilization == plan.gpu_memory_utilization
        server = plan.gpus[0].server
        assert config.server.gpu_memory_utilization * gpus[0].total >= server.total
        assert (config.server.gpu_memory_utilization - 0.01) * gpus[0].total < server.total
    if sharing == "sleep":
        trainer = plan.gpus[0].trainer
        assert trainer.peak + server.total > 40 * GiB  # why not split
        assert max(trainer.peak + SLEEPING_SERVER, trainer.resident + server.total) <= 40 * GiB


def test_eight_gpus_with_a_trainer_on_each_share_by_the_plan(tmp_path):
    trainer = {"distributed": "ddp", "processes": 8}
    config, plan = resolve_sharing(run_config(model_dir(tmp_path, "0.5b"), trainer=trainer), reading(*[24] * 8))
    assert plan.sharing == config.server.gpu_sharing == "split" and config.server.gpus == [0]


def test_a_run_that_fits_nowhere_is_refused_with_its_numbers_and_what_to_change(tmp_path):
    with pytest.raises(TrainingError) as refused:
        resolve_sharing(run_config(model_dir(tmp_path, "7b"), trainer={"gradient_checkpointing": False}),
                        reading(24))
    message = str(refused.value)
    assert message.startswith("the run does not fit on GPU 0 (24.0 GiB, taking turns (sleep mode)): ")
    assert "the trainer needs" in message and "weights 14.2 GiB" in message and "vLLM needs" in message
    assert "GiB short" in message and "To fit: " in message and "a GPU with at least" in message


def test_the_change_offered_is_one_that_makes_the_plan_fit(tmp_path):
    base = model_dir(tmp_path, "1.5b")
    config = run_config(base, server={"gpus": [1]}, trainer={"gradient_checkpointing": False,
                                                           "gpus": [0]})
    plan = plan_memory(config, read_shape(str(base)), [24 * GiB, 24 * GiB])
    assert plan.fits is False and plan.sharing == "none"
    assert plan.advice[0].startswith("turn on trainer.gradient_checkpointing")
    fixed = config.model_copy(update={"trainer": config.trainer.model_copy(update={"gradient_checkpointing": True})})
    assert plan_memory(fixed, read_shape(str(base)), [24 * GiB, 24 * GiB]).fits
    tokens = int(plan.advice[1].rsplit(" ", 1)[1])  # "lower grpo.micro_batch_tokens from 8192 to N"
    smaller = config.model_copy(update={"grpo": config.grpo.model_copy(update={"micro_batch_tokens": tokens})})
    assert plan_memory(smaller, read_shape(str(base)), [24 * GiB, 24 * GiB]).fits
    assert plan_memory(config.model_copy(update={"grpo": config.grpo.model_copy(
        update={"micro_batch_tokens": tokens + 64})}), read_shape(str(base)), [24 * GiB, 24 * GiB]).fits is False


def test_without_a_gpu_auto_means_none_and_nothing_is_planned(tmp_path):
    config, plan = resolve_sharing(run_config(model_dir(tmp_path, "7b")), [])
    assert plan is None and config.server.gpu_sharing == "none"


def test_a_sharing_mode_set_by_hand_keeps_a_share_set_by_hand(tmp_path):
    base = model_dir(tmp_path, "0.5b")
    config, plan = resolve_sharing(run_config(base, server={"gpu_sharing": "split", "gpu_memory_utilization": 0.6}),
                                   reading(80))
    assert config.server.gpu_sharing == "split" and config.server.gpu_memory_utilization == 0.6
    config, plan = resolve_sharing(run_config(base, server={"gpu_sharing": "sleep"}), reading(80))
    assert config.server.gpu_memory_utilization == plan.gpu_memory_utilization < 0.5


def test_the_trainers_fit_is_judged_against_what_is_free_on_its_gpu():
    gpus = [GpuMemory(0, "test GPU", free=3 * GiB, total=80 * GiB), GpuMemory(1, "other", 70 * GiB, 80 * GiB)]
    check_trainer_fits(3 * GiB, 0, gpus)
    with pytest.raises(TrainingError, match=r"needs about 4\.0 GiB more on GPU 0 \(test GPU\) and 3\.0 GiB of its "
                                            r"80\.0 GiB is free"):
        check_trainer_fits(4 * GiB, 0, gpus)
    check_trainer_fits(4 * GiB, 0, [])  # no reading (no GPU): nothing to judge


def test_a_config_json_without_a_needed_field_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(TrainingError, match="config.json lacks a field the memory plan needs"):
        read_shape(str(tmp_path))
    assert ModelShape.from_config({**QWEN["7b"], "head_dim": 64}).head_dim == 64


def test_the_plan_command_prints_the_plan_and_fails_when_it_does_not_fit(tmp_path, capsys):
    from training.__main__ import main

    path = tmp_path / "run.json"
    path.write_text(json.dumps({"base_model": str(model_dir(tmp_path, "7b")), "scenarios": [
        {"id": "a", "user_message": "hi"}], "server": {"kind": "vllm", "max_lora_rank": 16}, "lora": {"r": 16},
        "trainer": {"gradient_checkpointing": True}}))
    assert main(["plan", "--config", str(path), "--gpu-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert "GPU sharing: split" in out and "verdict: fits" in out
    assert main(["plan", "--config", str(path), "--gpu-gib", "24"]) == 1
    assert "does not fit" in capsys.readouterr().out
    assert main(["plan", "--config", str(path), "--gpu-gib", "80", "--gpu-count", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["server_gpus"] == [1]


def test_the_gpu_check_says_plainly_that_it_skipped_without_cuda(capsys, tmp_path):
    import torch

    from bench.gpu_check import main, table

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: `make gpu-check` measures instead")
    assert main(["--out", str(tmp_path / "gpu_check.json")]) == 0
    assert capsys.readouterr().out.startswith("gpu-check skipped: no CUDA device visible")
    assert not (tmp_path / "gpu_check.json").exists()  # no numbers written that were not measured
    rows = table({"card": "H100 SXM", "card_peak_tflops": 989.0, "bf16_peak_tflops": 700.0, "date": "2026-11-27",
                  "sizes": [
        {"size": "7b", "params": 7.6e9, "micro_batch_tokens": 8192, "budget_fill": 1.0, "tokens_per_s": 5000.0,
         "mfu": 0.41, "mfu_matmul": 0.58, "peak_bytes": 40 * GiB, "plan_bytes": 46.5 * GiB,
         "plan_over_measured": 46.5 / 40, "sampling_tokens_per_s": 900.0},
        {"size": "1.5b", "skipped": "its estimate (75 s) exceeds the 20 s left of the budget"}]}).splitlines()
    assert rows[4] == "| 7b | 7.60B | 8192 (100%) | 5000 | 41.0% | 58.0% | 40.0 GiB | 46.5 GiB | 1.16 | no | 900 |"
    assert rows[5].startswith("| 1.5b | skipped: its estimate (75 s) exceeds the 20 s left")


def test_taking_turns_only_changes_that_fit_are_offered(tmp_path):
    base = model_dir(tmp_path, "7b")
    no_ckpt = run_config(base, trainer={"gradient_checkpointing": False})
    # 24 GiB: even with checkpointing the trainer's resident weights beside an awake vLLM need 39 GiB; no one
    # change fits, so only a bigger GPU is offered (the step without checkpointing, 71 GiB of it measured
    # activations, plus a sleeping vLLM).
    plan = plan_memory(no_ckpt, read_shape(str(base)), [24 * GiB])
    trainer = plan.gpus[0].trainer
    assert plan.sharing == "sleep"
    bigger = (trainer.peak + SLEEPING_SERVER) / GiB
    assert plan.advice == [f"a GPU with at least {bigger:.1f} GiB (this one has 24.0 GiB)"]
    # 40 GiB: the step's activations are what overflow; checkpointing or a smaller micro-batch each fit.
    plan = plan_memory(no_ckpt, read_shape(str(base)), [40 * GiB])
    assert plan.sharing == "sleep" and plan.fits is False
    assert plan.advice[0].startswith("turn on trainer.gradient_checkpointing")
    tokens = int(next(a for a in plan.advice if a.startswith("lower grpo.micro_batch_tokens")).rsplit(" ", 1)[1])
    smaller = no_ckpt.model_copy(update={"grpo": no_ckpt.grpo.model_copy(update={"micro_batch_tokens": tokens})})
    assert plan_memory(smaller, read_shape(str(base)), [40 * GiB]).fits
