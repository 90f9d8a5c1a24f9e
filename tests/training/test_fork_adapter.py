"""A fork refuses a parent adapter of another shape: its LoRA settings are compared with the parent checkpoint's
adapter_config.json at launch, and the parent's weights load strictly (a missing or unexpected tensor is an error).
Loaded loosely, alpha 16 -> 64 rescaled every update silently and targets q,v -> q dropped half the tensors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training import run
from training.config import GRPOConfig, LoraConfig
from training.model.checkpoints import adapter_mismatches
from training.model.preflight import preflight
from training.rl.trainer import Trainer
from training.types import TrainingError

from tests.training.configs import small_config

QV = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def parent(tiny_model_dir, tmp_path_factory) -> Path:
    """A parent checkpoint: r 8, alpha 16, targets q and v, its adapter moved off its initial values."""
    trainer = Trainer(str(tiny_model_dir), LoraConfig(r=8, alpha=16, target_modules=QV), GRPOConfig(), seed=3)
    with torch.no_grad():
        for p in trainer.trained_params:
            p.add_(0.01)
    out = tmp_path_factory.mktemp("parent") / "step_0001"
    trainer.save_adapter(out)
    return out


def test_a_fork_with_another_alpha_is_refused_naming_it(tiny_model_dir, parent, tmp_path):
    config = small_config(tiny_model_dir, tmp_path / "fork", steps=1, init_checkpoint=str(parent),
                          lora={"r": 8, "alpha": 64, "target_modules": QV})
    with pytest.raises(TrainingError, match=r"alpha \(lora\.alpha\): the fork has 64, the parent checkpoint 16"):
        run(config)
    assert not (tmp_path / "fork" / "checkpoints").exists()
    assert preflight(config) == ["fork: alpha (lora.alpha): the fork has 64, the parent checkpoint 16"]


def test_a_fork_with_other_targets_is_refused_naming_them(tiny_model_dir, parent, tmp_path):
    config = small_config(tiny_model_dir, tmp_path / "fork", steps=1, init_checkpoint=str(parent),
                          lora={"r": 8, "alpha": 16, "target_modules": ["q_proj"]})
    with pytest.raises(TrainingError, match=r"target modules \(lora\.target_modules\): the fork has \['q_proj'\], "
                                            r"the parent checkpoint \['q_proj', 'v_proj'\]"):
        run(config)


def test_every_difference_is_named_rank_bias_rslora_and_modules_to_save_too(parent, tmp_path):
    changed = tmp_path / "changed"
    changed.mkdir()
    config = json.loads((parent / "adapter_config.json").read_text())
    config.update(r=16, bias="lora_only", use_rslora=True, modules_to_save=["lm_head"])
    (changed / "adapter_config.json").write_text(json.dumps(config))
    problems = adapter_mismatches(LoraConfig(r=8, alpha=16, target_modules=QV), changed)
    assert [p.split(":")[0] for p in problems] == ["rank (lora.r)", "bias", "rsLoRA", "modules to save"]
    assert adapter_mismatches(LoraConfig(r=8, alpha=16, target_modules=["v_proj", "q_proj"]), parent) == []


def test_weights_that_do_not_match_the_adapter_are_refused_not_dropped(tiny_model_dir, parent):
    fewer = Trainer(str(tiny_model_dir), LoraConfig(r=8, alpha=16, target_modules=["q_proj"]), GRPOConfig())
    with pytest.raises(TrainingError, match=r"0 missing tensor\(s\) \[\], 8 unexpected tensor\(s\)"):
        fewer.load(parent, optimizer=False)
    more = Trainer(str(tiny_model_dir), LoraConfig(r=8, alpha=16, target_modules=[*QV, "o_proj"]), GRPOConfig())
    with pytest.raises(TrainingError, match=r"8 missing tensor\(s\) \['.*o_proj.*'\], 0 unexpected"):
        more.load(parent, optimizer=False)


def test_a_matching_fork_loads_every_parent_tensor_strictly(tiny_model_dir, parent):
    from safetensors.torch import load_file

    fork = Trainer(str(tiny_model_dir), LoraConfig(r=8, alpha=16, target_modules=QV), GRPOConfig(), seed=9)
    fork.load(parent, optimizer=False)
    saved = load_file(parent / "adapter_model.safetensors")
    loaded = {k: p.detach() for k, p in fork._trained_by_saved_name().items()}
    assert loaded.keys() == saved.keys() and len(saved) == 16
    for name, tensor in saved.items():
        assert torch.equal(loaded[name], tensor), name
