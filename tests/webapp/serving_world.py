"""What the serving tests share (issue 37): real LoRA adapters of the tiny model (peft's own save format, as a run's
checkpoints are written), built once per recipe under var/test-cache and shared by every test and worker, and a
completed run of a project whose checkpoints are those adapters."""
from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

import pytest

from tests.webapp.conftest import ROOT

RECIPE = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "seeds": [1, 2, 3], "version": 1}


def build_adapters(model_dir: Path) -> list[Path]:
    """Three adapters with random (not zero) B matrices, so each answers unlike the base and unlike the others."""
    root = ROOT / "var" / "test-cache" / "serving-adapters"
    root.mkdir(parents=True, exist_ok=True)
    stamp = json.dumps({**RECIPE, "model": str(model_dir)}, sort_keys=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder across pytest workers
        dirs = [root / f"seed-{s}" for s in RECIPE["seeds"]]
        if (root / "recipe.json").exists() and (root / "recipe.json").read_text() == stamp \
                and all((d / "adapter_config.json").exists() for d in dirs):
            return dirs
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        for seed, out in zip(RECIPE["seeds"], dirs):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            peft_model = get_peft_model(model, LoraConfig(r=RECIPE["r"], lora_alpha=RECIPE["lora_alpha"],
                                                          target_modules=RECIPE["target_modules"],
                                                          init_lora_weights=False))
            shutil.rmtree(out, ignore_errors=True)
            peft_model.save_pretrained(out)
        (root / "recipe.json").write_text(stamp)
        return dirs


@pytest.fixture
def serving(inprocess_executor, settings, tiny_model_dir):
    """The embedded executor; every server it started is stopped at the end. Its idle time is longer than any pause
    of a test that uses the server (loading adapters on a busy machine took over 2 s); the tests of the idle stop
    itself shorten it (tests/webapp/test_serving.py, `quick_idle`)."""
    from webapp.execution.executors import wait_servers_stopped
    from webapp.models import ProjectServer

    settings.STUDIO_SERVE_IDLE_S = 30.0
    settings.STUDIO_SERVE_START_TIMEOUT_S = 120.0
    yield tiny_model_dir
    ProjectServer.objects.filter(status__in=["starting", "ready"]).update(status="stopped", stop_reason="test over")
    wait_servers_stopped(timeout=60)


@pytest.fixture(scope="session")
def lora_adapters(tiny_model_dir) -> list[Path]:
    return build_adapters(tiny_model_dir)


def completed_run(*, project, model_dir: Path, adapters: list[Path], name: str = "demo", **agent_fields):
    """A completed run on the tiny model with one checkpoint per adapter (steps 1, 2, ...)."""
    from tests.webapp.factories import agent_factory, run_factory
    from webapp.models import Checkpoint

    agent = agent_factory(project=project, base_model=str(model_dir), **agent_fields)
    run = run_factory(project=project, agent=agent, status="completed", name=name,
                      overrides={"lora": {"r": RECIPE["r"], "alpha": RECIPE["lora_alpha"]}})
    for step, path in enumerate(adapters, start=1):
        Checkpoint.objects.create(run=run, step_index=step, path=str(path), adapter_name=f"{run.config['name']}@{step}")
    return run


@pytest.fixture
def served_app(app_server) -> str:
    """The served app (tests/webapp/world.py: daphne, the embedded executor, project servers idling out after
    30 s); its base URL. The project servers it started are stopped, with it, when the test ends."""
    return app_server.url
