"""Merging nested config dicts (the deployment's run settings over a run's, a person's overrides over both): its
own module so that the run config's builder and the launch's memory plan both use it without importing each
other."""
from __future__ import annotations

from typing import Any


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
