"""Several processes train one run: torch.distributed data parallelism (DDP), or FSDP for big models.

Launch with torchrun (or `accelerate launch`), which sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT:

    torchrun --nproc-per-node 4 -m training run --config config.json

Rank 0 runs the loop (rollouts, scoring, checkpoints) and sends each step's groups to the others
(`send_to_ranks` / `receive_from_rank0`, over the rendezvous store: see ControlChannel), and SNAPSHOT when it saves the optimizer state (a collective under FSDP); every process
then holds the same step's trajectory groups and trains on its own shard of the rows, and the library's
collectives (DDP's gradient all-reduce, `all_reduce` of token counts and metrics) make the update the one a single
process would make: each micro-batch's loss is weighted by its share of the tokens of all ranks, and the DDP
average over ranks is undone by multiplying by the world size. When the run is over, every rank `leave`s.
"""
from __future__ import annotations

import logging
import os
import pickle
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from training.types import TrainingError

log = logging.getLogger(__name__)
SNAPSHOT = {"snapshot": True}  # rank 0 to the others: take the optimizer snapshot together (FSDP gathers it)


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if is_distributed() else (0, 1)


def launched_rank() -> int:
    """This process's rank as torchrun set it (0 when not launched by torchrun), before any process group."""
    return int(os.environ.get("RANK", "0"))


class ControlChannel:
    """Rank 0's instructions to the other ranks (a step's groups, SNAPSHOT, the run's final status) through the
    rendezvous store torchrun set up, which the other ranks poll: a wait here has no timeout, so rollouts, a
    review gate or a pause of any length between two steps never trips the collective timeout (NCCL's default
    is 10 minutes; `trainer.collective_timeout_s` only needs to cover a step's own collectives). Message k is
    the store key control/k; each reader acknowledges it, and rank 0 deletes a message every rank has read.
    A rank 0 that dies takes the store with it: the others' poll then fails, and torchrun ends the run."""

    PREFIX = "studio/control/"

    def __init__(self, store: Any, rank: int, world: int, poll_s: float = 0.05, heartbeat_s: float = 300.0) -> None:
        self.store, self.rank, self.world = store, rank, world
        self.poll_s, self.heartbeat_s = poll_s, heartbeat_s
        self.sent = self.received = 0
        self.longest_wait_s = 0.0  # the longest a receive waited (reported by tests and logs)

    def send(self, obj: Any) -> None:
        readers = self.world - 1
        read_by_all = self.store.add(self.PREFIX + "acks", 0) // readers if readers else self.sent
        for k in range(max(0, read_by_all - 8), read_by_all):  # the ones read since the last send (at most a few)
            self.store.delete_key(f"{self.PREFIX}{k}")
        self.store.set(f"{self.PREFIX}{self.sent}", pickle.dumps(obj))
        self.sent += 1

    def receive(self) -> Any:
        key = f"{self.PREFIX}{self.received}"
        started = last_beat = time.monotonic()
        while not self.store.check([key]):
            time.sleep(self.poll_s)
            if time.monotonic() - last_beat >= self.heartbeat_s:
                last_beat = time.monotonic()
                log.info("rank %d: waiting for rank 0's next instruction for %.0f s", self.rank, last_beat - started)
        self.longest_wait_s = max(self.longest_wait_s, time.monotonic() - started)
        obj = pickle.loads(self.store.get(key))
        self.store.add(self.PREFIX + "acks", 1)
        self.received += 1
        return obj


_channel: ControlChannel | None = None


def control_channel() -> ControlChannel:
    """This process's channel to rank 0 (made once, on the default process group's store)."""
    global _channel
    if _channel is None:
        rank, world = rank_and_world()
        _channel = ControlChannel(dist.distributed_c10d._get_default_store(), rank, world)
    return _channel


def send_to_ranks(obj: Any) -> None:
    """Rank 0: the next instruction for every other rank."""
    control_channel().send(obj)


def receive_from_rank0() -> Any:
    """A rank above 0: rank 0's next instruction, however long it takes to come."""
    return control_channel().receive()


def leave() -> None:
    """Every rank, once the run is over and its last collective is done: the ranks meet, then each takes its
    process group down. Left standing, gloo's worker threads outlive the interpreter and the process can abort
    at exit (SIGABRT, 'terminate called without an active exception'), which torchrun reports as a failed run.
    Not called on a failure: a rank still inside a collective would never reach the barrier. A rank that died
    after the run's last status does not fail the run: its result is already saved."""
    if is_distributed():
        try:
            dist.barrier()
        except Exception as err:  # noqa: BLE001 - the run is over; the group still goes down
            log.warning("a rank did not reach the end-of-run barrier: %s", err)
        dist.destroy_process_group()


def init_from_env(device: str, gpus: list[int] | None = None, timeout_s: float | None = None) -> None:
    """Joins the process group torchrun describes in the environment (nccl on CUDA, gloo on CPU); `timeout_s`
    bounds each collective (trainer.collective_timeout_s; None: torch's default)."""
    global _channel
    if is_distributed() or "WORLD_SIZE" not in os.environ:
        return
    _channel = None  # a new group has a new store
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(local_device(device, gpus)))
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s) if timeout_s else None)


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
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # FSDP2: one unit per decoder layer (a layer's weights are whole only while it runs), then the rest.
        # Frozen base weights and trainable LoRA weights share a unit; on CPU it runs over gloo (the tests).
        mesh = init_device_mesh(next(module.parameters()).device.type, (dist.get_world_size(),))
        for layer in [m for m in module.modules() if type(m).__name__.endswith("DecoderLayer")]:
            fully_shard(layer, mesh=mesh)
        return fully_shard(module, mesh=mesh)
    return torch.nn.parallel.DistributedDataParallel(module)


def is_sharded(module: torch.nn.Module) -> bool:
    """Whether `module`'s parameters are FSDP shards: reading or writing them whole is then a collective."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor gathered from every rank (every rank must call this); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


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
