"""How the engine starts vLLM: CPU flags only on CPU, LoRA rank rounding, extra flags, clear errors."""
from __future__ import annotations

import os
import sys

import pytest

from training.config import ServerConfig
from training.servers.vllm import is_cpu_build, lora_rank_arg, vllm_command
from training.types import TrainingError


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
    command, env = command_for(vllm_device="gpu", gpu_sharing="sleep", gpu_memory_utilization=0.31)
    assert "--enable-sleep-mode" in command and env["VLLM_SERVER_DEV_MODE"] == "1"
    # It starts beside the trainer's resident weights: the planned share, never vLLM's default 0.9.
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.31"
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


def test_the_sequence_limits_are_passed_only_when_set() -> None:
    command, _ = command_for(vllm_device="gpu", max_model_len=4096, max_num_seqs=64)
    assert command[command.index("--max-model-len") + 1] == "4096"
    assert command[command.index("--max-num-seqs") + 1] == "64"
    command, _ = command_for(vllm_device="gpu", gpu_sharing="auto")  # auto unresolved (Try it): no sharing flags
    assert not {"--max-model-len", "--max-num-seqs", "--gpu-memory-utilization", "--enable-sleep-mode"} & set(command)


# Every mode's command line, as the engine builds it for a GPU.
MODES = {
    "none": {},
    "split": {"gpu_sharing": "split", "gpu_memory_utilization": 0.35},
    "sleep": {"gpu_sharing": "sleep", "gpu_memory_utilization": 0.42},
    "own GPUs with tensor parallelism": {"gpus": [0, 1]},
    "sequence limits": {"max_model_len": 4096, "max_num_seqs": 64},
}
PARSE = """
import json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:  # the parser the api_server module's main() builds: launchers/ since vLLM 0.32, openai/ before
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
args = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))
validate_parsed_serve_args(args)
print(json.dumps({k: getattr(args, k, None) for k in ("gpu_memory_utilization", "enable_sleep_mode",
      "tensor_parallel_size", "max_model_len", "max_num_seqs", "enable_lora", "max_lora_rank")}))
"""


@pytest.mark.vllm
@pytest.mark.parametrize("mode", list(MODES))
def test_every_flag_of_each_modes_command_line_is_one_vllm_serve_parses(tmp_path, mode) -> None:
    """vLLM's own argument parser (that of `vllm serve` and of the api_server module we start) reads the command
    line the engine builds for each GPU-sharing mode: a flag it does not know is an error there."""
    import json
    import subprocess

    python = os.environ.get("VLLM_PYTHON")
    if not python:
        pytest.fail("VLLM_PYTHON is not set; run `make test-vllm`")
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    command, _ = vllm_command(ServerConfig(kind="vllm", python=python, vllm_device="gpu", max_lora_rank=16,
                                           **MODES[mode]), str(tmp_path), 8123, "base")
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    done = subprocess.run([python, "-c", PARSE, json.dumps(command[3:])], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed["enable_lora"] is True and parsed["max_lora_rank"] == 16
    settings = MODES[mode]
    if "gpu_memory_utilization" in settings:
        assert parsed["gpu_memory_utilization"] == settings["gpu_memory_utilization"]
    assert parsed["enable_sleep_mode"] is (mode == "sleep")
    assert parsed["tensor_parallel_size"] == (2 if mode.startswith("own GPUs") else 1)
    if mode == "sequence limits":
        assert (parsed["max_model_len"], parsed["max_num_seqs"]) == (4096, 64)
