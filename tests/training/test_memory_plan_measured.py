"""The memory plan's activation terms are measured (training/model/gpu/activation_probe.py), checked against autograd on
whole tiny Qwen2 and Llama models; `trainer.gradient_checkpointing: auto` turns on only when the plan needs it;
settings that would defeat the plan (`gpu_sharing: none` beside the trainer, a share flag in the server's extra
arguments) are refused, naming what the plan would do (docs/gpu.md)."""
from __future__ import annotations

import sys

import pytest

from tests.training.test_memory_plan import model_dir, reading, run_config
from training.config import ServerConfig, parse_run_config
from training.model.gpu.activation_probe import measure_pass
from training.model.gpu.memory_plan import GiB, ModelShape, activations, plan_memory, read_shape
from training.model.gpu.sharing import resolve_sharing
from training.types import TrainingError

# Whole models of each architecture at test size: wider than the probe's own (which scales heads to 4 and 8
# wide and builds one or two layers), so the plan's terms are extrapolated to these, as to a real model.
TINY = {
    "qwen2": {"model_type": "qwen2", "hidden_size": 128, "intermediate_size": 704, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 1024, "tie_word_embeddings": False,
              "max_position_embeddings": 1024},
    "llama": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_attention_heads": 4,
              "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 1024, "tie_word_embeddings": False,
              "max_position_embeddings": 1024},
}
TOKENS, CHUNK, RANK = 256, 64, 8
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def whole_model(fields: dict, checkpointing: bool):
    """The model as the trainer builds it: bf16 weights, peft LoRA on every projection, non-reentrant
    checkpointing when asked."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, target_modules=ALL, task_type="CAUSAL_LM"))
    model.train()
    return model


def autograd_saved_bytes(model, vocab: int) -> int:
    """What autograd saves for the backward in one pass of the engine's log-prob function: every distinct storage
    its saved-tensor hooks see, the weights excluded."""
    import torch

    from training.rl.grpo import token_logprobs

    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, vocab, (1, TOKENS), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        token_logprobs(model, ids, torch.ones_like(ids), chunk_tokens=CHUNK).sum().backward()
    return sum(saved.values())


@pytest.fixture
def one_thread():
    """Tensors this small run several times faster on one CPU thread than on several (this thread's setting)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-checkpointing", "checkpointing"])
@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_the_plans_activation_terms_match_autograd_on_a_whole_model(architecture, checkpointing, one_thread):
    fields = TINY[architecture]
    planned = activations(ModelShape.from_config(fields), tokens=TOKENS, dtype_bytes=2, checkpointing=checkpointing,
                          chunk_tokens=CHUNK, lora_r=RANK, lora_targets=ALL)
    assert planned.measured
    saved = autograd_saved_bytes(whole_model(fields, checkpointing), fields["vocab_size"])
    assert planned.kept == pytest.approx(saved, rel=0.15)
    _, _, peak = measure_pass(whole_model(fields, checkpointing), fields["vocab_size"], tokens=TOKENS,
                              chunk_tokens=CHUNK)
    assert planned.total == pytest.approx(peak, rel=0.15)


def test_the_plan_says_which_terms_are_measured_and_which_assumed(tmp_path):
    base = model_dir(tmp_path, "0.5b")
    lines = plan_memory(run_config(base), read_shape(str(base)), [80 * GiB]).lines()
    terms = next(line for line in lines if line.startswith("terms: "))
    assert "measured: activations by the probe of this architecture" in terms and "assumed: runtime" in terms
    unknown = ModelShape.from_config({**TINY["qwen2"], "model_type": "no-such-architecture"})
    guessed = activations(unknown, tokens=TOKENS, dtype_bytes=2, checkpointing=False, chunk_tokens=CHUNK)
    assert not guessed.measured and guessed.kept > 0


def test_checkpointing_is_auto_by_default_and_turns_on_for_7b_on_one_80_gib_gpu(tmp_path):
    base = model_dir(tmp_path, "7b")
    config = run_config(base, trainer={"gradient_checkpointing": "auto"})
    assert parse_run_config({"base_model": "m", "scenarios": [{"id": "a", "user_message": "hi"}]}
                            ).trainer.gradient_checkpointing == "auto"
    resolved, plan = resolve_sharing(config, reading(80))
    assert resolved.trainer.gradient_checkpointing is True and plan.fits
    assert any(line.startswith("gradient checkpointing: on (auto: without it the run is ") for line in plan.lines())


def test_auto_checkpointing_stays_off_when_the_plan_fits_without_it_and_on_cpu(tmp_path):
    base = model_dir(tmp_path, "0.5b")
    resolved, plan = resolve_sharing(run_config(base, trainer={"gradient_checkpointing": "auto"}), reading(80))
    assert resolved.trainer.gradient_checkpointing is False and plan.fits
    assert "gradient checkpointing: off (auto: the plan fits without it)" in plan.lines()
    resolved, plan = resolve_sharing(run_config(base, trainer={"gradient_checkpointing": "auto"}), [])
    assert plan is None and resolved.trainer.gradient_checkpointing is False


def test_7b_with_checkpointing_forced_off_is_refused_on_one_80_gib_gpu(tmp_path):
    with pytest.raises(TrainingError) as refused:
        resolve_sharing(run_config(model_dir(tmp_path, "7b"), trainer={"gradient_checkpointing": False}), reading(80))
    message = str(refused.value)
    assert message.startswith("the run does not fit on GPU 0 (80.0 GiB")
    assert "To fit: turn on trainer.gradient_checkpointing" in message


def test_gpu_sharing_none_beside_the_trainer_on_one_gpu_is_refused_naming_the_plan(tmp_path):
    base = model_dir(tmp_path, "7b")
    with pytest.raises(TrainingError) as refused:
        resolve_sharing(run_config(base, server={"gpu_sharing": "none"}), reading(80))
    message = str(refused.value)
    assert message.startswith("server.gpu_sharing 'none' puts vLLM and the trainer on the same GPU 0")
    assert "The plan would share it as 'split', vLLM's share 0.29" in message
    config, plan = resolve_sharing(run_config(base, server={"gpu_sharing": "none"}), reading(80, 80))
    assert plan.refusal() is None and config.server.gpus == [1]  # a GPU of its own: nothing to share


@pytest.mark.parametrize("flag", [["--gpu-memory-utilization", "0.9"], ["--gpu-memory-utilization=0.9"],
                                  ["--gpu_memory_utilization", "0.9"], ["--gpu-memory", "0.9"],
                                  ["--kv-cache-memory-bytes=8G"]])
def test_extra_server_arguments_that_set_the_share_are_refused_naming_the_flag(tmp_path, flag):
    base = model_dir(tmp_path, "7b")
    with pytest.raises(TrainingError, match=f"server.extra_args sets vLLM's memory share \\({flag[0]}\\)"):
        run_config(base, server={"gpu_sharing": "split", "extra_args": flag})
    with pytest.raises(TrainingError, match=f"sets vLLM's memory share \\({flag[0]}\\), which the memory plan sets"):
        resolve_sharing(run_config(base, server={"extra_args": ["--max-num-batched-tokens", "8192", *flag]}),
                        reading(80))


def test_a_workers_share_flag_is_refused_when_vllm_starts_beside_the_trainer(monkeypatch):
    from training.servers.vllm import vllm_command

    monkeypatch.setenv("VLLM_EXTRA_ARGS", "--gpu-memory-utilization 0.9")
    config = ServerConfig(kind="vllm", python=sys.executable, vllm_device="gpu", gpu_sharing="split",
                          gpu_memory_utilization=0.3)
    with pytest.raises(TrainingError, match=r"\(--gpu-memory-utilization; server.extra_args or the worker's "
                                            r"\$VLLM_EXTRA_ARGS\)"):
        vllm_command(config, "/models/base", 8123, "base")
