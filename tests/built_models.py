"""The models the tests build themselves (no downloads), one cache entry per build recipe.

Every conftest takes them from here, so a clean clone builds each model once: under var/test-cache/, in a folder
named by a hash of the recipe (a new recipe builds beside the old, never over a model a running test loads),
behind a file lock (parallel pytest-xdist workers wait for the one that builds, then reuse it).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

CACHE = Path(__file__).resolve().parents[1] / "var" / "test-cache"


def built_path(name: str, recipe: dict[str, Any]) -> Path:
    """Where the build of this recipe lives (built or not): the tests' model catalogue lists it before any build."""
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    return CACHE / f"{name}-{key}"


def built_model(name: str, recipe: dict[str, Any], ensure: Callable[[Path], Path]) -> Path:
    """`ensure(path)` builds the model at path unless a build of this recipe is there; one process at a time."""
    path = built_path(name, recipe)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return ensure(path)


def _tiny_recipe() -> dict[str, Any]:
    from training.fixtures import tiny_model as recipe

    return {"build_version": recipe.BUILD_VERSION, "seed": 0, "sft_steps": recipe.SFT_STEPS}


def tiny_model_path() -> Path:
    return built_path("tiny-model", _tiny_recipe())


def tiny_model() -> Path:
    """The demo's tiny 2048 model (training/fixtures/tiny_model.py)."""
    from training.fixtures import tiny_model as recipe

    return built_model("tiny-model", _tiny_recipe(), recipe.ensure_tiny_model)


def quick_mailbox_model(sft_steps: int) -> Path:
    """The tiny mailbox model with a short warm-up (tests/training/mcp_helpers.py says why it is enough)."""
    from training.fixtures import tiny_mailbox_model as recipe

    return built_model("tiny-mailbox-model", {"build_version": recipe.BUILD_VERSION, "seed": 0, "sft_steps": sft_steps},
                       lambda path: recipe.ensure_tiny_mailbox_model(path, sft_steps=sft_steps))
