"""One GPU shared by vLLM and the trainer (sleep mode), and GPUs split between them, against an HTTP double of
vLLM (tests/training/vllm_double.py): the order of the calls, the flags and environment vLLM is started with,
and clear errors."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from training import run
from training.config import parse_run_config
from training.events import TrainStep
from training.types import TrainingError

from tests.training.configs import small_config

DOUBLE = Path(__file__).with_name("vllm_double.py")


def fake_vllm_python(tmp_path: Path) -> str:
    """An 'interpreter' that runs the double in place of `python -m vllm.entrypoints.openai.api_server`."""
    script = tmp_path / "vllm-python"
    script.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{DOUBLE}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def sharing_config(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **server: object):
    monkeypatch.setenv("VLLM_DOUBLE_LOG", str(tmp_path / "vllm.jsonl"))
    monkeypatch.delenv("VLLM_EXTRA_ARGS", raising=False)
    return small_config(model_dir, tmp_path / "run", server={
        "kind": "vllm", "python": fake_vllm_python(tmp_path), "vllm_device": "gpu", **server})


def logged(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "vllm.jsonl").read_text().splitlines()]


async def by_position(group):
    from training.types import Score

    return [Score(reward=i / len(group.trajectories)) for i in range(len(group.trajectories))]


def test_vllm_sleeps_while_the_trainer_steps_and_wakes_before_the_new_adapter_loads(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    trained: list[float] = []

    def sink(event):
        if isinstance(event, TrainStep):
            trained.append(time.time())

    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch, gpu_sharing="sleep")
    summary = run(config, scorer=by_position, sink=sink)
    assert summary.status == "completed" and summary.steps_done == 2
    events = logged(tmp_path)
    start = events[0]
    assert "--enable-sleep-mode" in start["argv"] and start["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    calls = [e["event"] for e in events[1:]]
    assert "refused_while_asleep" not in calls  # no rollout and no adapter load reached a sleeping server
    assert calls == ["sleep", "wake_up", "load_lora_adapter"] * 2
    assert all(e["query"] == "level=1" for e in events if e["event"] == "sleep")
    # Each step trained while the server slept: sleep < train step finished < wake_up < new adapter loaded.
    times = [e["time"] for e in events[1:]]
    for step, done in enumerate(trained):
        sleep, wake, load = times[3 * step: 3 * step + 3]
        assert sleep < done < wake < load


@pytest.mark.parametrize("wake", ["refuse", "stays_asleep"])
def test_a_server_that_does_not_wake_is_an_error_naming_the_endpoint(tiny_model_dir, tmp_path, monkeypatch, wake):
    monkeypatch.setenv("VLLM_DOUBLE_WAKE", wake)
    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch, gpu_sharing="sleep")
    with pytest.raises(TrainingError, match="/wake_up"):
        run(config, scorer=by_position)
    assert not (tmp_path / "run" / "checkpoints" / "step_0001").exists()  # nothing served or committed after


def test_without_sleep_mode_the_server_is_never_put_to_sleep(tiny_model_dir, tmp_path, monkeypatch):
    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch, gpu_sharing="split", gpu_memory_utilization=0.4)
    run(config.model_copy(update={"steps": 1}), scorer=by_position)
    events = logged(tmp_path)
    argv = events[0]["argv"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.4" and "--enable-sleep-mode" not in argv
    assert [e["event"] for e in events[1:]] == ["load_lora_adapter"]


def base_config(**parts: object) -> dict:
    return {"base_model": "m", "scenarios": [{"id": "a", "user_message": "hi"}], **parts}


def test_gpus_shared_by_vllm_and_the_trainer_need_a_sharing_plan() -> None:
    server = {"kind": "vllm", "gpus": [0, 1]}
    with pytest.raises(TrainingError, match=r"share GPU\(s\) \[1\].*gpu_sharing"):
        parse_run_config(base_config(server={**server, "gpu_sharing": "none"}, trainer={"gpus": [1]}))
    assert parse_run_config(base_config(server=server, trainer={"gpus": [1]})).server.gpu_sharing == "auto"
    parse_run_config(base_config(server={**server, "gpu_sharing": "sleep"}, trainer={"gpus": [1]}))
    parse_run_config(base_config(server=server, trainer={"gpus": [2]}))


@pytest.mark.parametrize("parts, message", [
    ({"server": {"kind": "local", "gpu_sharing": "sleep"}}, "server.kind 'vllm' only"),
    ({"server": {"kind": "external", "url": "http://x/v1", "gpus": [0]}}, "server.kind 'vllm' only"),
    ({"server": {"kind": "vllm", "gpus": [0, 0]}}, "distinct"),
    ({"server": {"kind": "vllm", "gpus": []}}, "at least one"),
    ({"trainer": {"gpus": [-1]}}, "distinct"),
    ({"trainer": {"gpus": [2, 3]}}, "torchrun --nproc-per-node 2"),
    ({"trainer": {"gpus": [0]}, "device": "cpu"}, "device is 'cpu'"),
    ({"trainer": {"processes": 2}}, "processes above 1 needs trainer.distributed"),
    ({"trainer": {"distributed": "ddp", "processes": 3, "gpus": [0, 1]}}, "one process per GPU"),
])
def test_bad_gpu_settings_are_clear_errors(parts: dict, message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        parse_run_config(base_config(**parts))


def test_a_worker_starts_one_training_process_per_listed_gpu_or_as_many_as_asked() -> None:
    def processes(**trainer: object) -> int:
        return parse_run_config(base_config(trainer=trainer)).trainer.launch_processes()

    assert processes() == 1
    assert processes(distributed="ddp", gpus=[1, 2, 3]) == 3
    assert processes(distributed="fsdp", processes=2) == 2
    with pytest.raises(TrainingError, match="set trainer.processes"):
        processes(distributed="ddp")


def one_gpu(total: int, free_after_server: int, log: Path):
    """A reading of one GPU of `total` bytes, all free until the vLLM double has started (it logs its start),
    `free_after_server` after: what the driver would say once vLLM holds its share."""
    from training.model.gpu.sharing import GpuMemory

    def read() -> list[GpuMemory]:
        return [GpuMemory(0, "test GPU", free_after_server if log.exists() else total, total)]

    return read


def tiny_plan(model_dir: Path, config):
    from training.model.gpu.memory_plan import plan_memory, read_shape

    return plan_memory(config, read_shape(str(model_dir)), [80 * 2**30]).gpus[0]


def test_split_checks_the_trainers_fit_after_vllm_has_started_against_what_is_free(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    from training.events import MemoryPlanned, RunFailed

    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch)  # gpu_sharing: auto, the default
    total = 80 * 2**30
    events: list = []
    # Before vLLM starts the whole card is free, so a check made then would pass; after, too little is.
    with pytest.raises(TrainingError, match=r"one training step needs about .* GiB more on GPU 0 \(test GPU\) and "
                                            r"0\.0 GiB of its 80\.0 GiB is free"):
        run(config, scorer=by_position, sink=events.append, gpu_reader=one_gpu(total, 1024, tmp_path / "vllm.jsonl"))
    planned = [e for e in events if isinstance(e, MemoryPlanned)]
    assert [p.sharing for p in planned] == ["split"] and "side by side" in planned[0].reason
    argv = logged(tmp_path)[0]["argv"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == str(planned[0].gpu_memory_utilization)
    assert isinstance(events[-1], RunFailed)
    assert not (tmp_path / "run" / "checkpoints" / "step_0001").exists()


def test_split_trains_when_what_is_free_after_vllm_started_holds_a_step(tiny_model_dir, tmp_path, monkeypatch):
    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch)
    needed = tiny_plan(tiny_model_dir, config).trainer.activations
    summary = run(config.model_copy(update={"steps": 1}), scorer=by_position,
                  gpu_reader=one_gpu(80 * 2**30, needed * 2, tmp_path / "vllm.jsonl"))
    assert summary.status == "completed"


def test_auto_on_a_card_too_small_for_both_side_by_side_sleeps_with_the_planned_share(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    from training.events import MemoryPlanned
    from training.model.gpu.memory_plan import SLEEPING_SERVER

    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch)
    gpu = tiny_plan(tiny_model_dir, config)
    # Big enough for the two taking turns, too small for them side by side.
    total = max(gpu.trainer.peak + SLEEPING_SERVER, gpu.trainer.resident + gpu.server.total)
    assert total < gpu.trainer.peak + gpu.server.total
    events: list = []
    summary = run(config.model_copy(update={"steps": 1}), scorer=by_position, sink=events.append,
                  gpu_reader=one_gpu(total, total, tmp_path / "vllm.jsonl"))
    assert summary.status == "completed"
    (planned,) = [e for e in events if isinstance(e, MemoryPlanned)]
    assert planned.sharing == "sleep" and "take turns" in planned.reason
    share = -(-gpu.server.total * 100 // total) / 100  # the server's need as a share of the card, rounded up
    argv = logged(tmp_path)[0]["argv"]
    assert "--enable-sleep-mode" in argv and argv[argv.index("--gpu-memory-utilization") + 1] == str(share)
    assert [e["event"] for e in logged(tmp_path)[1:]] == ["sleep", "wake_up", "load_lora_adapter"]


def test_auto_with_a_gpu_to_spare_gives_vllm_its_own(tiny_model_dir, tmp_path, monkeypatch):
    from training.model.gpu.sharing import GpuMemory

    config = sharing_config(tiny_model_dir, tmp_path, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    two = [GpuMemory(i, "test GPU", 80 * 2**30, 80 * 2**30) for i in range(2)]
    run(config.model_copy(update={"steps": 1}), scorer=by_position, gpu_reader=lambda: two)
    start = logged(tmp_path)[0]
    assert start["env"]["CUDA_VISIBLE_DEVICES"] == "5"  # the second visible GPU; the trainer keeps the first
    assert "--gpu-memory-utilization" not in start["argv"] and "--enable-sleep-mode" not in start["argv"]
