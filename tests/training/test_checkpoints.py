"""The per-step adapter write and the checkpoint files resume relies on."""
from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from training.config import GRPOConfig, LoraConfig
from training.model.checkpoints import checkpoint_dir, latest_optimizer_state, save_state
from training.rl.trainer import Trainer


def test_the_fast_adapter_write_holds_exactly_what_peft_saves(tiny_model_dir, tmp_path):
    trainer = Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(), seed=0)
    with torch.no_grad():
        for p in trainer.model.parameters():
            if p.requires_grad:
                p.normal_()  # a fresh adapter's B is zero: give every weight a value to compare
    trainer.save(tmp_path / "peft", {"step": 1})
    for attempt in range(2):  # the second write uses the parameter map found by the first
        trainer.save_adapter(tmp_path / f"fast{attempt}")
        ours, peft = (load_file(tmp_path / d / "adapter_model.safetensors") for d in (f"fast{attempt}", "peft"))
        assert ours.keys() == peft.keys() and all(torch.equal(ours[k], peft[k]) for k in peft)
    config = json.loads((tmp_path / "fast1" / "adapter_config.json").read_text())
    assert config["r"] == 8 and sorted(config["target_modules"]) == sorted(LoraConfig().target_modules)


def test_resume_takes_the_newest_optimizer_state_at_or_before_the_step(tmp_path):
    for step in (2, 4, 5):
        checkpoint_dir(tmp_path, step).mkdir(parents=True)
    save_state({"x": 1}, checkpoint_dir(tmp_path, 2) / "optimizer.pt")
    save_state({"x": 4}, checkpoint_dir(tmp_path, 4) / "optimizer.pt")
    assert latest_optimizer_state(tmp_path, 5) == checkpoint_dir(tmp_path, 4)
    assert latest_optimizer_state(tmp_path, 3) == checkpoint_dir(tmp_path, 2)
    assert latest_optimizer_state(tmp_path, 1) is None
    assert not list(tmp_path.rglob("*.partial"))
