"""A run's scenarios: the inline ones of its config, then those of its `scenarios_file` (JSONL), validated alike.

Below both the loop and the after-step checks (held-out evaluation), which each need the same list.
"""
from __future__ import annotations

import json
from pathlib import Path

from training.config import RunConfig, ScenarioSpec
from training.types import Scenario, TrainingError


def load_scenarios(config: RunConfig) -> list[Scenario]:
    specs = [s.model_dump() for s in config.scenarios]
    if config.scenarios_file:
        path = Path(config.scenarios_file)
        if not path.exists():
            raise TrainingError(f"scenarios_file not found: {path}")
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    specs.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise TrainingError(f"{path}:{n}: not valid JSON: {err}") from None
    # validated here too: a file is input like any other
    return [Scenario(**ScenarioSpec.model_validate(s).model_dump()) for s in specs]
