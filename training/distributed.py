"""Several processes train one run: torch.distributed data parallelism (DDP), or FSDP for big models.

Launch with torchrun (or `accelerate launch`), which sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT:

    torchrun --nproc-per-node 4 -m training run --config config.json

Rank 0 runs the loop (rollouts, scoring, checkpoints) and sends each step's groups to the others
(`broadcast_from_rank0`); every process then holds the same step's trajectory groups and trains on its own
shard of the rows, and the library's collectives (DDP's gradient all-reduce, `all_reduce` of token counts
and metrics) make the update the one a single process would make: each micro-batch's loss is weighted by its
share of the tokens of all ranks, and the DDP average over ranks is undone by multiplying by the world size.
"""
from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from training.errors import TrainingError


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if is_distributed() else (0, 1)


def launched_rank() -> int:
    """This process's rank as torchrun set it (0 when not launched by torchrun), before any process group."""
    return int(os.environ.get("RANK", "0"))


def broadcast_from_rank0(obj: Any) -> Any:
    """Rank 0's object on every rank (torch.distributed.broadcast_object_list); `obj` on the others is ignored."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def init_from_env(device: str, gpus: list[int] | None = None) -> None:
    """Joins the process group torchrun describes in the environment (nccl on CUDA, gloo on CPU)."""
    if is_distributed() or "WORLD_SIZE" not in os.environ:
        return
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(local_device(device, gpus)))
    dist.init_process_group(backend=backend)


def local_device(device: str, gpus: list[int] | None = None) -> str:
    """One GPU per process: cuda becomes cuda:LOCAL_RANK, or cuda:gpus[LOCAL_RANK] where the run names the
    trainer's GPUs (trainer.gpus; the others may serve inference)."""
    if device != "cuda":
        return device
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    if gpus is None:
        return f"cuda:{rank}" if "LOCAL_RANK" in os.environ else device
    if rank >= len(gpus):
        raise TrainingError(f"process LOCAL_RANK {rank} has no GPU: trainer.gpus lists {len(gpus)} ({gpus}); "
                            "launch as many processes as trainer.gpus lists")
    return f"cuda:{gpus[rank]}"


def wrap(module: torch.nn.Module, mode: str) -> torch.nn.Module:
    """The module as the chosen engine trains it; unchanged in a single process."""
    if not is_distributed() or mode == "none":
        return module
    if mode == "fsdp":
        from functools import partial

        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        # One FSDP unit per decoder layer: a layer's weights are gathered only while it runs. use_orig_params
        # lets frozen base weights and trainable LoRA weights share a unit.
        layers = {type(m) for m in module.modules() if type(m).__name__.endswith("DecoderLayer")}
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls=layers)
        return FullyShardedDataParallel(module, use_orig_params=True, auto_wrap_policy=policy,
                                        device_id=torch.cuda.current_device() if torch.cuda.is_available() else None)
    return torch.nn.parallel.DistributedDataParallel(module)


def sum_over_ranks(values: list[float], device: str) -> list[float]:
    if not is_distributed():
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def max_over_ranks(value: int, device: str) -> int:
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())
