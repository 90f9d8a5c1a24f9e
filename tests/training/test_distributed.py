"""Data parallelism on CPU: two gloo processes make the same update as one process."""
from __future__ import annotations

import os
from tests.ports import free_port
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from training.config import GRPOConfig, LoraConfig, TrainerConfig
from training.model.gpu.distributed import is_sharded, leave, whole
from training.rl.trainer import Trainer
from training.types import TrainingError

from tests.training.test_trainer import groups


def step_result(trainer: Trainer) -> dict:
    metrics = trainer.train_step(groups())
    grads = {n: whole(p.grad).detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    adapter = {n: whole(p).detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    return {"metrics": metrics, "grads": grads, "adapter": adapter}


def _rank(rank: int, world: int, port: int, model_dir: str, out: str, mode: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    trainer = Trainer(model_dir, LoraConfig(), GRPOConfig(learning_rate=1e-2, micro_batch_size=2), seed=1,
                      options=TrainerConfig(distributed=mode))
    assert isinstance(trainer.policy, torch.nn.parallel.DistributedDataParallel) or is_sharded(trainer.policy)
    result = step_result(trainer)
    if mode == "fsdp":  # what rank 0 saves: the adapter gathered whole from both ranks' shards
        trainer.save_adapter(Path(out) / f"adapter{rank}")
    torch.save(result, Path(out) / f"rank{rank}.pt")
    leave()  # what a run does at its end: the ranks meet, then each takes its process group down
    assert not torch.distributed.is_initialized()


def _leave_after_a_peer_died(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo")
    torch.distributed.barrier()
    if rank == 1:
        os._exit(0)  # gone after the run's last collective, before the end-of-run barrier
    leave()  # the barrier fails at once (connection closed); the group still goes down, nothing raises
    assert not torch.distributed.is_initialized()


def test_a_rank_gone_after_the_run_does_not_fail_the_others_ending():
    mp.spawn(_leave_after_a_peer_died, args=(free_port(),), nprocs=2)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_gloo_processes_give_the_single_process_loss_lora_gradients_and_update(tiny_model_dir, tmp_path, mode):
    mp.spawn(_rank, args=(2, free_port(), str(tiny_model_dir), str(tmp_path), mode), nprocs=2, join=True)
    trainer = Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(learning_rate=1e-2, micro_batch_size=2), seed=1)
    single = step_result(trainer)
    trainer.save_adapter(tmp_path / "single")
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert result["metrics"]["trained_sequences"] == single["metrics"]["trained_sequences"] == 8
        assert result["metrics"]["tokens"] == single["metrics"]["tokens"]
        assert result["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5, abs=1e-7)
        # The norm over both ranks' shards, so both clip alike (a rank's own shard norm would not).
        assert result["metrics"]["grad_norm"] == pytest.approx(single["metrics"]["grad_norm"], rel=1e-4)
        for name, grad in single["grads"].items():
            assert torch.allclose(result["grads"][name], grad, atol=1e-6, rtol=1e-4), name
        for name, weight in single["adapter"].items():
            # Adam's first step moves each weight by about lr x sign(gradient): compared where the sign is not
            # float noise (gradients of 0 +- 1e-9 may take either sign in either run).
            grad = single["grads"][name]
            clear = (grad == 0) | (grad.abs() > 1e-3 * grad.abs().max())  # lora_A: no gradient while B is 0
            assert clear.float().mean() > 0.5, name
            assert torch.allclose(result["adapter"][name][clear], weight[clear], atol=1e-6, rtol=1e-4), name
    if mode == "fsdp":  # rank 0's file holds the whole adapter, under the names a single process saves
        saved, expected = (load_file(tmp_path / d / "adapter_model.safetensors") for d in ("adapter0", "single"))
        assert saved.keys() == expected.keys()
        gathered = torch.load(tmp_path / "rank0.pt", weights_only=False)["adapter"]
        assert all(torch.equal(saved[k], gathered[k.replace(".weight", ".default.weight")]) for k in saved)


def test_trainer_gpus_give_each_process_its_own_gpu(monkeypatch):
    from training.model.gpu.distributed import local_device

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert local_device("cuda", [2, 3]) == "cuda:2" and local_device("cuda") == "cuda"
    assert local_device("cpu", [2, 3]) == "cpu"
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert local_device("cuda", [2, 3]) == "cuda:3" and local_device("cuda") == "cuda:1"
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(TrainingError, match="LOCAL_RANK 2 has no GPU"):
        local_device("cuda", [2, 3])


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_a_run_under_torchrun_rolls_out_on_rank_0_and_trains_on_both_ranks(tiny_model_dir, tmp_path, mode):
    """`torchrun --nproc-per-node 2 -m training run`: rank 0 samples, scores, reports and checkpoints; both train.
    The trainer's collectives need every rank in every step, so a rank that did not get the groups would hang
    the step (the subprocess timeout fails the test)."""
    import json
    import subprocess
    import sys

    from tests.training.configs import small_config

    config = small_config(tiny_model_dir, tmp_path / "run", trainer={"distributed": mode})
    path = tmp_path / "config.json"
    path.write_text(config.model_dump_json())

    def torchrun() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                               "--master-port", str(free_port()), "-m", "training", "run", "--config", str(path)],
                              capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))

    done = torchrun()
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [s["step"] for s in steps] == [1, 2]  # reported once, by rank 0
    assert [s["adapter"] for s in steps] == ["t@1", "t@2"]
    # Both ranks' rows of the step, summed over ranks: the rows with a nonzero advantage (r - group mean).
    def nonzero_advantages(step: dict) -> int:
        return sum(abs(r - sum(g["rewards"]) / len(g["rewards"])) > 1e-9
                   for g in step["groups"] if not g["skipped"] for r in g["rewards"])

    assert [s["trained_sequences"] for s in steps] == [nonzero_advantages(s) for s in steps], steps
    assert done.stderr.count("run completed: 2 steps") == 2  # each rank ends with rank 0's status
    assert (tmp_path / "run" / "checkpoints" / "step_0002" / "adapter_model.safetensors").exists()
    assert (tmp_path / "run" / "checkpoints" / "step_0002" / "optimizer.pt").exists()  # taken by both ranks
    # Resumed for one more step: both ranks load the adapter and the optimizer state, rank 0 serves step 2's.
    path.write_text(config.model_copy(update={"steps": 3}).model_dump_json())
    resumed = torchrun()
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [json.loads(line) for line in resumed.stdout.splitlines() if line.startswith("{")]
    assert [(s["step"], s["rollout_model"]) for s in steps] == [(3, "t@2")]


def test_several_processes_need_a_distributed_trainer(tiny_model_dir, tmp_path):
    import subprocess
    import sys

    from tests.training.configs import small_config

    path = tmp_path / "config.json"
    path.write_text(small_config(tiny_model_dir, tmp_path / "run").model_dump_json())
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(free_port()), "-m", "training", "run", "--config", str(path)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode != 0 and "trainer.distributed is 'none'" in done.stderr
