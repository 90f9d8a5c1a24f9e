"""How the engine starts vLLM: CPU flags only on CPU, LoRA rank rounding, extra flags, clear errors."""
from __future__ import annotations

import os
import sys

import pytest

from training.config import ServerConfig
from training.errors import TrainingError
from training.servers.vllm import is_cpu_build, lora_rank_arg, vllm_command


def command_for(**config: object) -> tuple[list[str], dict]:
    return vllm_command(ServerConfig(kind="vllm", python=sys.executable, **config), "/models/base", 8123, "base")


def test_the_cpu_build_gets_float32_eager_and_a_small_kv_cache() -> None:
    command, env = command_for(vllm_device="cpu", cpu_kvcache_gb=2)
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert command[command.index("--dtype") + 1] == "float32"
    assert "--enforce-eager" in command
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_a_gpu_gets_none_of_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    command, env = command_for(vllm_device="gpu", extra_args=["--gpu-memory-utilization", "0.5"])
    assert "--dtype" not in command and "--enforce-eager" not in command
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    assert command[-2:] == ["--gpu-memory-utilization", "0.5"]
    assert ["--enable-lora", "--max-lora-rank", "8"] == command[command.index("--enable-lora"):][:3]
    assert command[command.index("--served-model-name") + 1] == "base"


def test_a_worker_sets_its_own_flags_and_a_runs_extra_args_replace_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_EXTRA_ARGS", "--gpu-memory-utilization 0.4 --max-model-len 4096")
    command, _ = command_for(vllm_device="gpu")
    assert command[-4:] == ["--gpu-memory-utilization", "0.4", "--max-model-len", "4096"]
    command, _ = command_for(vllm_device="gpu", extra_args=["--seed", "1"])
    assert command[-2:] == ["--seed", "1"] and "--max-model-len" not in command


def test_auto_asks_the_vllm_environment_whether_it_holds_the_cpu_build() -> None:
    # This test's own interpreter has no vllm-cpu distribution, so it reads as a GPU environment.
    assert is_cpu_build(sys.executable) is False
    command, _ = command_for()
    assert "--enforce-eager" not in command


@pytest.mark.vllm
def test_the_vllm_cpu_environment_reads_as_the_cpu_build() -> None:
    python = os.environ.get("VLLM_PYTHON")
    if not python:
        pytest.fail("VLLM_PYTHON is not set; run `make test-vllm`")
    assert is_cpu_build(python) is True


def test_lora_ranks_round_up_to_one_vllm_accepts() -> None:
    assert [lora_rank_arg(r) for r in (1, 4, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(TrainingError, match="largest"):
        lora_rank_arg(1024)


def test_a_missing_vllm_interpreter_is_an_actionable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_PYTHON", raising=False)
    with pytest.raises(TrainingError, match="make vllm-venv"):
        vllm_command(ServerConfig(kind="vllm"), "/models/base", 8123, "base")
    with pytest.raises(TrainingError, match="does not exist"):
        vllm_command(ServerConfig(kind="vllm", python="/nowhere/bin/python"), "/models/base", 8123, "base")


def test_sleep_mode_starts_vllm_with_its_flag_and_dev_mode_endpoints() -> None:
    command, env = command_for(vllm_device="gpu", gpu_sharing="sleep")
    assert "--enable-sleep-mode" in command and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--gpu-memory-utilization" not in command
    command, env = command_for(vllm_device="gpu")
    assert "--enable-sleep-mode" not in command and "VLLM_SERVER_DEV_MODE" not in env


def test_a_memory_split_sets_vllms_share_and_extra_args_still_come_last() -> None:
    command, _ = command_for(vllm_device="gpu", gpu_sharing="split", gpu_memory_utilization=0.35,
                             extra_args=["--seed", "1"])
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.35"
    assert command[-2:] == ["--seed", "1"]


def test_sharing_and_gpu_pinning_are_refused_on_the_cpu_build() -> None:
    with pytest.raises(TrainingError, match="GPU build"):
        command_for(vllm_device="cpu", gpu_sharing="sleep")
    with pytest.raises(TrainingError, match="GPU build"):
        command_for(vllm_device="cpu", gpus=[0])


def test_server_gpus_pin_vllm_through_the_workers_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    command, env = command_for(vllm_device="gpu", gpus=[0, 1])
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # a worker pinned to four GPUs gives vLLM its last one
    command, env = command_for(vllm_device="gpu", gpus=[3])
    assert env["CUDA_VISIBLE_DEVICES"] == "7" and "--tensor-parallel-size" not in command
    with pytest.raises(TrainingError, match="sees only 4 GPU"):
        command_for(vllm_device="gpu", gpus=[4])


@pytest.mark.parametrize("model_type, parser", [("qwen2", "hermes"), ("qwen3", "hermes"),
                                                ("llama", "llama3_json"), ("mistral", "mistral")])
def test_tool_calling_uses_the_parser_of_the_models_family(tmp_path, model_type, parser) -> None:
    (tmp_path / "config.json").write_text(f'{{"model_type": "{model_type}"}}')
    command, _ = vllm_command(ServerConfig(kind="vllm", python=sys.executable, vllm_device="gpu"), str(tmp_path),
                              8123, "base")
    assert "--enable-auto-tool-choice" in command
    assert command[command.index("--tool-call-parser") + 1] == parser


def test_a_run_config_sets_or_turns_off_the_tool_call_parser_and_unknown_families_get_none(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')

    def flags(parser: str) -> list[str]:
        command, _ = vllm_command(ServerConfig(kind="vllm", python=sys.executable, vllm_device="gpu",
                                               tool_call_parser=parser), str(tmp_path), 8123, "base")
        return command[command.index("--enable-auto-tool-choice"):][:3] if "--enable-auto-tool-choice" in command \
            else []

    assert flags("auto") == []
    assert flags("none") == []
    assert flags("pythonic") == ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
