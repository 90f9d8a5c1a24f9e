"""The local server's engine beyond the shared contract: the adapter loaded last is sampled from a folded copy
of the model (no peft dispatch), and that copy computes exactly what peft computes."""
from __future__ import annotations

import threading
from pathlib import Path

import openai
import pytest
import torch

from training.config import GRPOConfig, LoraConfig
from training.rl.grpo import group_advantages
from training.rl.trainer import Trainer
from training.servers.engine import ApiError
from training.servers.folded import foldable
from training.servers.inprocess import InProcessServer
from training.types import Scenario, TrainingError, Trajectory, TrajectoryGroup

BOARD = "New game. Board:\n. . 2 .\n. . . .\n. 2 . .\n. . . ."
MESSAGES = [{"role": "user", "content": BOARD}]


def trained_adapter(model_dir: Path, out: Path, lora: LoraConfig) -> Path:
    """One GRPO step that favours one answer over another: an adapter whose weights are far from zero."""
    trajectories = [Trajectory("board", MESSAGES + [{"role": "assistant", "content": text}])
                    for text in ("<move>left</move>", "<move>up</move> <move>up</move>")]
    for t, a in zip(trajectories, group_advantages(torch.tensor([1.0, 0.0])).tolist()):
        t.advantage = a
    trainer = Trainer(str(model_dir), lora, GRPOConfig(learning_rate=3e-2), seed=0)
    trainer.train_step([TrajectoryGroup(Scenario("board", BOARD), trajectories)])
    trainer.save(out, {"step": 1})
    return out


def logprobs(server: InProcessServer, model: str) -> tuple[list[int], list[float]]:
    with server.client() as client:
        choice = client.chat.completions.create(model=model, messages=MESSAGES, temperature=0.0, max_tokens=12,
                                                logprobs=True, extra_body={"return_token_ids": True}).choices[0]
    return choice.model_extra["token_ids"], [t.logprob for t in choice.logprobs.content]


@pytest.fixture(scope="module")
def adapters(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    attention_only = root / "qv"  # untrained (B = 0): serves exactly what the base serves
    Trainer(str(tiny_model_dir), LoraConfig(target_modules=["q_proj", "v_proj"]), GRPOConfig(), seed=1).save(
        attention_only, {"step": 0})
    return {"all-linear": trained_adapter(tiny_model_dir, root / "all", LoraConfig()), "attention-only": attention_only}


def test_the_folded_copy_serves_what_peft_serves(tiny_model_dir: Path, adapters: dict[str, Path]) -> None:
    with InProcessServer(str(tiny_model_dir), "base", 8, "cpu") as server:
        server.load_adapter("run@1", adapters["all-linear"])
        assert server.engine.folded == "run@1"
        folded_ids, folded_lps = logprobs(server, "run@1")
        server.load_adapter("other@1", adapters["attention-only"])  # run@1 is now served through peft
        assert server.engine.folded == "other@1"
        peft_ids, peft_lps = logprobs(server, "run@1")
        base_ids, base_lps = logprobs(server, "base")
    assert folded_ids == peft_ids
    assert folded_lps == pytest.approx(peft_lps, abs=1e-4)
    assert sum(folded_lps) != pytest.approx(sum(base_lps), abs=0.05)  # the adapter does change the numbers


def test_folding_an_adapter_sets_the_layers_it_does_not_adapt_back_to_the_base(
        tiny_model_dir: Path, adapters: dict[str, Path]) -> None:
    # all-linear first (every layer folded), then an untrained adapter on q and v only: the MLP layers and the
    # other projections must no longer carry the first adapter's weights.
    with InProcessServer(str(tiny_model_dir), "base", 8, "cpu") as server:
        base = logprobs(server, "base")
        server.load_adapter("run@1", adapters["all-linear"])
        server.load_adapter("qv@1", adapters["attention-only"])
        server.unload_adapter("run@1")
        assert server.engine.folded == "qv@1"
        served = logprobs(server, "qv@1")
    assert served[0] == base[0]
    assert served[1] == pytest.approx(base[1], abs=1e-4)


def test_an_unloaded_folded_adapter_is_not_served_and_the_next_load_folds_anew(
        tiny_model_dir: Path, adapters: dict[str, Path]) -> None:
    with InProcessServer(str(tiny_model_dir), "base", 8, "cpu") as server:
        server.load_adapter("run@1", adapters["all-linear"])
        first = logprobs(server, "run@1")
        server.unload_adapter("run@1")
        assert server.engine.folded is None
        server.load_adapter("run@2", adapters["all-linear"])  # refilled into run@1's slot, then folded
        assert server.engine.folded == "run@2"
        second = logprobs(server, "run@2")
    assert second[0] == first[0]
    assert second[1] == pytest.approx(first[1], abs=1e-5)


def test_adapters_that_are_not_plain_lora_are_left_to_peft() -> None:
    for config, expected in (({"bias": "none"}, True), ({"use_dora": True}, False), ({"bias": "all"}, False),
                             ({"modules_to_save": ["lm_head"]}, False)):
        assert foldable({"r": 8, **config}) is expected, config


def test_work_given_to_the_executor_runs_on_the_engine_thread_between_batches(tiny_model_dir: Path) -> None:
    with InProcessServer(str(tiny_model_dir), "base", 8, "cpu") as server:
        ran_on = server.executor.submit(threading.current_thread).result(timeout=30)
        # A job that itself needs the engine thread runs at once instead of waiting behind itself.
        nested = server.executor.submit(lambda: server.engine.call(threading.current_thread)).result(timeout=30)
    assert ran_on is nested is server.engine.worker


def test_a_stopped_engine_refuses_work_instead_of_leaving_it_waiting(tiny_model_dir: Path,
                                                                     adapters: dict[str, Path]) -> None:
    server = InProcessServer(str(tiny_model_dir), "base", 8, "cpu")
    server.stop()
    with pytest.raises(openai.InternalServerError, match="stopped"):
        server.client().chat.completions.create(model="base", messages=MESSAGES, max_tokens=4)
    with pytest.raises(TrainingError, match="stopped"):
        server.load_adapter("run@1", adapters["all-linear"])
    with pytest.raises(ApiError, match="stopped"):
        server.executor.submit(print)
