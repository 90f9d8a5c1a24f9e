"""Multi-process runs survive long waits between steps: the ranks above 0 wait for rank 0's next instruction on
the rendezvous store (training.model.gpu.distributed.ControlChannel), not inside a collective, so a pause longer
than the collective timeout (trainer.collective_timeout_s) neither kills a rank nor the run. Two gloo processes on CPU."""
from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tests.ports import free_port

TIMEOUT_S = 4.0  # the collective timeout of these runs
PAUSE_S = 3 * TIMEOUT_S + 1


class PauseAfterStep1:
    """Rank 0's control: pauses once step 1 has finished, for PAUSE_S, then runs on."""

    def __init__(self) -> None:
        self.paused_at: float | None = None
        self.resumed_at: float | None = None

    def __call__(self, event) -> None:  # the sink: step 1's end starts the pause
        if getattr(event, "kind", "") == "step_finished" and event.step == 1:
            self.paused_at = time.monotonic()

    def state(self) -> str:
        if self.paused_at is None:
            return "run"
        if time.monotonic() - self.paused_at < PAUSE_S:
            return "pause"
        self.resumed_at = self.resumed_at or time.monotonic()
        return "run"


def _paused_run(rank: int, port: int, model_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from training.model.gpu import distributed
    from training import run

    from tests.training.configs import small_config

    config = small_config(Path(model_dir), Path(out) / "run", steps=2, device="cpu",
                          trainer={"distributed": "ddp", "collective_timeout_s": TIMEOUT_S})
    control = PauseAfterStep1()
    summary = run(config, control=control, sink=control)
    waited = distributed._channel.longest_wait_s if distributed._channel else 0.0
    (Path(out) / f"rank{rank}.json").write_text(json.dumps({
        "status": summary.status, "steps_done": summary.steps_done, "longest_wait_s": waited,
        "paused_s": (control.resumed_at - control.paused_at) if control.resumed_at else None}))


def test_a_two_rank_run_paused_for_three_collective_timeouts_resumes_and_completes(tiny_model_dir, tmp_path):
    mp.spawn(_paused_run, args=(free_port(), str(tiny_model_dir), str(tmp_path)), nprocs=2, join=True)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert rank0["status"] == "completed" and rank0["steps_done"] == 2
    assert rank0["paused_s"] >= 3 * TIMEOUT_S  # rank 0 really held the run that long
    assert rank1["status"] == "completed"  # the status rank 0 sent at the end
    assert rank1["longest_wait_s"] >= 3 * TIMEOUT_S  # ...and rank 1 waited through it, outside any collective
    assert (tmp_path / "run" / "checkpoints" / "step_0002" / "adapter_model.safetensors").exists()


def _collective_after_a_long_wait(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    from training.model.gpu.distributed import init_from_env

    init_from_env("cpu", timeout_s=1.0)
    if rank == 0:
        time.sleep(4.0)
        os._exit(0)
    try:
        torch.distributed.all_reduce(torch.ones(1))
        outcome = "returned"
    except Exception as err:  # noqa: BLE001 - what gloo raises on a timeout is the point
        outcome = f"raised {type(err).__name__}"
    Path(out, "outcome").write_text(outcome)
    os._exit(0)


def test_the_collective_timeout_setting_bounds_a_collective(tmp_path):
    """Why the channel is needed: the same wait inside a collective fails once the timeout has passed."""
    started = time.monotonic()
    mp.spawn(_collective_after_a_long_wait, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    assert (tmp_path / "outcome").read_text().startswith("raised")
    assert time.monotonic() - started < 30


def test_messages_every_rank_has_read_are_deleted_from_the_store():
    from training.model.gpu.distributed import ControlChannel

    store = torch.distributed.HashStore()
    sender, reader = ControlChannel(store, 0, 2), ControlChannel(store, 1, 2)
    for k in range(5):
        sender.send({"step": k})
        assert reader.receive() == {"step": k}
    sender.send("completed")
    assert [store.check([f"{ControlChannel.PREFIX}{k}"]) for k in range(6)] == [False] * 5 + [True]
    assert reader.receive() == "completed"
