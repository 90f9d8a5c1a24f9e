"""Checkpoints on disk: `<output_dir>/checkpoints/step_NNNN/` holds the adapter after training step N and
`state.json` (step, adapter name); every `checkpoint_every` steps, and whenever a run stops, also the optimizer
state (`optimizer.pt`). A checkpoint is written under a temporary name and renamed when complete, so a killed
process never leaves a half checkpoint that resume would trust; the optimizer file is renamed into place too.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Checkpoint:
    step: int
    path: Path
    adapter_name: str


def adapter_name(run_name: str, step: int) -> str:
    """Versioned, so a stale adapter can never be served under the current name."""
    return f"{run_name}@{step}"


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return output_dir / "checkpoints" / f"step_{step:04d}"


def latest_checkpoint(output_dir: Path) -> Checkpoint | None:
    root = output_dir / "checkpoints"
    if not root.is_dir():
        return None
    # Sorted by number, not name: step_10000 comes after step_9999 (names are zero-padded to four digits only).
    complete = sorted((p for p in root.glob("step_*") if p.name[5:].isdigit() and (p / "state.json").exists()),
                      key=lambda p: int(p.name[5:]))
    if not complete:
        return None
    state = json.loads((complete[-1] / "state.json").read_text())
    return Checkpoint(step=state["step"], path=complete[-1], adapter_name=state["adapter_name"])


def commit_checkpoint(staging: Path, final: Path) -> None:
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)


def latest_optimizer_state(output_dir: Path, step: int) -> Path | None:
    """The newest checkpoint at or before `step` that holds an optimizer state."""
    for s in range(step, 0, -1):
        if (checkpoint_dir(output_dir, s) / "optimizer.pt").exists():
            return checkpoint_dir(output_dir, s)
    return None


def save_state(state: Any, path: Path) -> None:
    import torch

    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)
