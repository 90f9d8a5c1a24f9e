"""Run configs for engine tests."""
from __future__ import annotations

from pathlib import Path

from training.config import RunConfig
from training.fixtures.demo import demo_config


def small_config(model_dir: Path, out: Path, **overrides) -> RunConfig:
    """The demo task shrunk to seconds per step, sampled by the in-process server (the local server's engine
    without its process and HTTP: about 9 s less a run). A test about the server itself passes
    `server={"kind": "local"}`."""
    data = demo_config(out_dir=out, steps=2, model_dir=model_dir, name="t").model_dump()
    data["server"]["kind"] = "inprocess"
    data["grpo"].update(group_size=4, groups_per_step=2)
    data["environment"]["options"].update(max_turns=2)
    data["sampling"]["max_tokens"] = 10
    if "evaluation" not in overrides:  # the demo's held-out evaluation only where a test asks for it
        data["evaluation"] = {}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return RunConfig.model_validate(data)
