"""The SFT run kind end to end on the tiny model: the CLI, the learning-rate schedule, held-out loss, checkpoints,
an exact resume, and the held-out win rate (the GRPO runs' evaluation) on an SFT checkpoint."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from training.__main__ import main  # noqa: E402
from training.config import parse_run_config  # noqa: E402
from training.config.sft import SFTOptions, learning_rate_at  # noqa: E402
from training.events import (  # noqa: E402
    CheckpointSaved, EvaluationFinished, HeldOutLoss, RunStarted, StaticControl, StepFinished)
from training import run  # noqa: E402
from training.fixtures.demo import demo_config  # noqa: E402
from training.fixtures.tiny_model import synthetic_games  # noqa: E402


def write_games(path: Path, count: int, seed: int = 11) -> Path:
    path.write_text("\n".join(json.dumps({"messages": g}) for g in synthetic_games(count, seed=seed)) + "\n")
    return path


def sft_config(model_dir: Path, out: Path, data: Path, **sft) -> dict:
    return {"kind": "sft", "name": "teach", "base_model": str(model_dir), "output_dir": str(out), "device": "cpu",
            "sft": {"data_file": str(data), "epochs": 2, "batch_tokens": 600, "micro_batch_tokens": 600,
                    "learning_rate": 5e-3, "warmup_ratio": 0.0, "held_out_fraction": 0.2, "eval_every": 2,
                    "save_every": 3, **sft}}


def test_the_schedule_warms_up_then_decays_to_its_floor():
    options = SFTOptions(learning_rate=1.0, warmup_ratio=0.2, schedule="cosine", min_lr_ratio=0.1)
    rates = [learning_rate_at(s, 10, options) for s in range(1, 11)]
    assert rates[:2] == [0.5, 1.0]  # two warm-up steps up to the peak
    assert rates[2] == 1.0 and rates[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[2:], rates[3:]))
    linear = SFTOptions(learning_rate=1.0, warmup_ratio=0.0, schedule="linear")
    assert [learning_rate_at(s, 5, linear) for s in range(1, 6)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    constant = SFTOptions(learning_rate=0.3, warmup_ratio=0.0, schedule="constant")
    assert {learning_rate_at(s, 7, constant) for s in range(1, 8)} == {0.3}


def test_the_cli_teaches_the_tiny_model_and_reports_train_and_held_out_loss(tiny_model_dir, tmp_path, capsys):
    data = write_games(tmp_path / "games.jsonl", 24)
    config = tmp_path / "config.json"
    body = sft_config(tiny_model_dir, tmp_path / "out", data)
    del body["kind"]  # the sft command assumes it
    config.write_text(json.dumps(body))
    assert main(["sft", "--config", str(config)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    steps = [r["step"] for r in records]
    assert steps == list(range(1, len(records) + 1)) and len(records) >= 4
    assert {r["epoch"] for r in records} == {1, 2}
    assert all(r["tokens"] <= 600 and r["trained_tokens"] > 0 for r in records)
    held = [r["eval_loss"] for r in records if "eval_loss" in r]
    assert len(held) >= 2 and held[-1] < held[0]  # the held-out conversations' loss falls: it learned the format
    checkpoints = sorted((tmp_path / "out" / "checkpoints").iterdir())
    expected = sorted({s for s in steps if s % 3 == 0} | {steps[-1]})
    assert [int(p.name[5:]) for p in checkpoints] == expected
    last = checkpoints[-1]
    assert {"adapter_model.safetensors", "adapter_config.json", "optimizer.pt"} <= {p.name for p in last.iterdir()}
    assert json.loads((last / "state.json").read_text()) == {"step": steps[-1], "adapter_name": f"teach@{steps[-1]}",
                                                              "kind": "sft"}


def test_a_cancelled_run_resumes_exactly_where_it_stopped(tiny_model_dir, tmp_path):
    data = write_games(tmp_path / "games.jsonl", 16, seed=4)
    whole = parse_run_config(sft_config(tiny_model_dir, tmp_path / "whole", data, save_every=100))
    summary = run(whole)
    assert summary.status == "completed"

    control = StaticControl()
    events: list = []

    def sink(event):
        events.append(event)
        if isinstance(event, StepFinished) and event.step == 3:
            control.set("cancel")

    split = parse_run_config(sft_config(tiny_model_dir, tmp_path / "split", data, save_every=100))
    first = run(split, sink=sink, control=control)
    assert first.status == "cancelled" and first.steps_done == 3  # saved at the cancel, not at save_every
    resumed: list = []
    second = run(split, sink=resumed.append)
    started = next(e for e in resumed if isinstance(e, RunStarted))
    assert started.resumed and started.start_step == 4 and started.total_steps == summary.steps_done
    assert second.status == "completed" and second.steps_done == summary.steps_done
    assert not any(isinstance(e, HeldOutLoss) and e.step == 0 for e in resumed)  # measured once, at the start

    from safetensors.torch import load_file

    a = load_file(summary.last_checkpoint.path / "adapter_model.safetensors")
    b = load_file(second.last_checkpoint.path / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key
    losses = {e.step: e.metrics["loss"] for e in events + resumed if isinstance(e, StepFinished)}
    assert sorted(losses) == list(range(1, summary.steps_done + 1))
    assert all(math.isclose(losses[s], summary.history[s - 1]["loss"], rel_tol=1e-5) for s in losses)


def test_the_held_out_win_rate_judges_an_sft_checkpoint_against_the_base(tiny_model_dir, tmp_path):
    data = write_games(tmp_path / "games.jsonl", 12, seed=2)
    game = demo_config(out_dir=tmp_path / "unused", model_dir=tiny_model_dir).model_dump(mode="json")
    body = sft_config(tiny_model_dir, tmp_path / "out", data, epochs=1, max_steps=2)
    body.update(system_prompt=game["system_prompt"], scenarios=game["scenarios"][:3],
                environment={"kind": "game_2048", "options": {"winning_tile": 64, "max_turns": 2}},
                sampling={"temperature": 1.0, "max_tokens": 10}, server={"kind": "inprocess"},
                evaluation={"held_out_ids": [s["id"] for s in game["scenarios"][:3]], "every": 100, "samples": 2})
    events: list = []
    summary = run(parse_run_config(body), sink=events.append)
    assert summary.status == "completed" and summary.steps_done == 2
    (evaluation,) = [e for e in events if isinstance(e, EvaluationFinished)]
    assert evaluation.step == 2 and evaluation.model == "teach@2"  # the SFT checkpoint, served by name
    assert evaluation.metrics["eval_scenarios"] == 3 and evaluation.metrics["eval_samples"] == 2
    assert 0.0 <= evaluation.metrics["eval_win_rate"] <= 1.0
    low, high = evaluation.metrics["eval_ci_low"], evaluation.metrics["eval_ci_high"]
    assert low <= evaluation.metrics["eval_win_rate"] <= high
    saved = [e.step for e in events if isinstance(e, CheckpointSaved)]
    assert saved == [2]  # saved for the evaluation (save_every is 3)


def test_sft_options_and_run_kinds_are_checked_at_the_edge(tiny_model_dir, tmp_path):
    from training.types import TrainingError

    with pytest.raises(TrainingError, match="the `sft` section is for kind .sft. runs"):
        parse_run_config({"base_model": "m", "scenarios": [{"id": "a", "user_message": "hi"}], "sft": {}})
    with pytest.raises(TrainingError, match="micro_batch_tokens .* above sft.batch_tokens"):
        parse_run_config({"kind": "sft", "base_model": "m", "sft": {"batch_tokens": 100, "micro_batch_tokens": 200}})
    assert parse_run_config({"kind": "sft", "base_model": "m"}).sft.epochs == 3  # the section's defaults
    grpo = tmp_path / "grpo.json"
    grpo.write_text(json.dumps({"kind": "grpo", "base_model": str(tiny_model_dir),
                                "scenarios": [{"id": "a", "user_message": "hi"}]}))
    assert main(["sft", "--config", str(grpo)]) == 2  # refused, with the command that trains it
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(TrainingError, match="line 1: no assistant message"):
        run(parse_run_config(sft_config(tiny_model_dir, tmp_path / "out", bad)))
