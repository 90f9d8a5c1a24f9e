"""How a run's vLLM and trainer share the worker's GPUs, decided by the memory plan when the run starts.

`read_gpus()` is the one place that asks the driver (nvidia-smi) how much memory each visible GPU has (and has
free); the loop takes it as a seam (`train(..., gpu_reader=...)`), so a test can give a machine of any size.
`resolve_sharing` turns `server.gpu_sharing: auto` into none / split / sleep (and a placement and vLLM's share)
and `trainer.gradient_checkpointing: auto` into on or off, and refuses a run whose plan does not fit (or that
sets `gpu_sharing: none` on the trainer's GPU); `check_trainer_fits` is the trainer's check against the memory
that is actually free, made after vLLM has taken its share (split) or before it starts (sleep).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from training.config import RunConfig
from training.model.gpu.memory_plan import MemoryPlan, gib, plan_memory, read_shape
from training.types import TrainingError


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    free: int  # bytes
    total: int  # bytes


GpuReader = Callable[[], list[GpuMemory]]


def read_gpus() -> list[GpuMemory]:
    """This process's visible GPUs (CUDA_VISIBLE_DEVICES) and their memory now, from nvidia-smi: asking torch
    would create a CUDA context on every GPU in every rank. [] without a GPU (or without nvidia-smi)."""
    import os

    return read_gpus_smi(os.environ.get("CUDA_VISIBLE_DEVICES"))


def resolve_sharing(config: RunConfig, gpus: list[GpuMemory]) -> tuple[RunConfig, MemoryPlan | None]:
    """The config with `server.gpu_sharing` (and vLLM's GPUs and memory share) as the plan decides, and the
    plan; a TrainingError with the plan's numbers when it does not fit. Without GPUs (or on CPU) nothing is
    planned and `auto` means none."""
    server = config.server
    if not gpus or config.device == "cpu":
        if server.gpu_sharing == "auto":
            config = config.model_copy(update={"server": server.model_copy(update={"gpu_sharing": "none"})})
        if config.trainer.gradient_checkpointing == "auto":  # nothing to fit: the faster choice
            config = config.model_copy(update={"trainer": config.trainer.model_copy(
                update={"gradient_checkpointing": False})})
        return config, None
    plan = plan_memory(config, read_shape(config.base_model), [g.total for g in gpus])
    if (refusal := plan.refusal()) is not None:
        raise TrainingError(refusal)
    config = config.model_copy(update={"trainer": config.trainer.model_copy(
        update={"gradient_checkpointing": plan.gradient_checkpointing})})
    if server.kind != "vllm":
        return config, plan
    update: dict[str, object] = {"gpu_sharing": plan.sharing if plan.sharing in ("none", "split", "sleep") else "none"}
    if server.gpus is None and len(gpus) > 1:  # else vLLM takes every visible GPU's first: the trainer's
        update["gpus"] = plan.server_gpus
    planned_share = server.gpu_sharing == "auto" or "gpu_memory_utilization" not in server.model_fields_set
    if plan.gpu_memory_utilization is not None and planned_share:
        update["gpu_memory_utilization"] = plan.gpu_memory_utilization
    return config.model_copy(update={"server": server.model_copy(update=update)}), plan


def gpu_index(device: str) -> int:
    """The visible-GPU index of a torch device string (cuda = cuda:0)."""
    return int(device.split(":", 1)[1]) if ":" in device else 0


def check_trainer_fits(needed: int, gpu: int, gpus: list[GpuMemory]) -> None:
    """Refuses a step that needs `needed` bytes more than GPU `gpu` has free now (no reading: nothing to check)."""
    reading = next((g for g in gpus if g.index == gpu), None)
    if reading is None or needed <= reading.free:
        return
    raise TrainingError(
        f"one training step needs about {gib(needed)} more on GPU {gpu} ({reading.name}) and {gib(reading.free)} "
        f"of its {gib(reading.total)} is free now that the inference server holds its share: lower "
        "grpo.micro_batch_tokens or server.gpu_memory_utilization, turn on trainer.gradient_checkpointing, or set "
        "server.gpu_sharing to 'sleep'")


def read_gpus_smi(visible: str | None = None) -> list[GpuMemory]:
    """The visible GPUs as `nvidia-smi` reports them, without initialising CUDA in this process (a worker that
    forks engines must not); [] where there is no nvidia-smi or no GPU. `visible`: CUDA_VISIBLE_DEVICES."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_smi(out, visible)


def parse_smi(text: str, visible: str | None) -> list[GpuMemory]:
    """nvidia-smi's CSV (index, name, total MiB, free MiB) as the GPUs this process sees, in CUDA's order."""
    rows = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit() and parts[2].isdigit() and parts[3].isdigit():
            rows[int(parts[0])] = (parts[1], int(parts[2]) * 2**20, int(parts[3]) * 2**20)
    order = sorted(rows)
    if visible is not None and visible.strip():
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        order = [int(v) for v in wanted if v.isdigit() and int(v) in rows] if all(v.isdigit() for v in wanted) \
            else order  # GPU UUIDs: not mapped; every GPU listed
    return [GpuMemory(i, rows[physical][0], rows[physical][2], rows[physical][1]) for i, physical in enumerate(order)]
