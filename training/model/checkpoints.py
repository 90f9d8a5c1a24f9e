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


@dataclass
class RunSummary:
    """What a run (GRPO or SFT) returns: how it ended, its newest checkpoint and the metrics of each step."""

    status: str  # completed | cancelled
    steps_done: int
    last_checkpoint: Checkpoint | None
    history: list[dict[str, Any]]


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


def adapter_mismatches(lora: Any, adapter_dir: Path) -> list[str]:
    """How a fork's LoRA settings (`lora`, a LoraConfig) differ from its parent checkpoint's adapter_config.json,
    one sentence per difference; [] when they agree. Loaded anyway, a parent of another shape would train
    something else than the fork says: another alpha rescales every update, other targets drop tensors."""
    path = Path(adapter_dir) / "adapter_config.json"
    try:
        parent = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return [f"the parent checkpoint's adapter_config.json cannot be read ({err})"]
    ours = {"rank (lora.r)": (lora.r, parent.get("r")),
            "alpha (lora.alpha)": (lora.alpha, parent.get("lora_alpha")),
            "target modules (lora.target_modules)": (sorted(lora.target_modules),
                                                     sorted(_as_list(parent.get("target_modules")))),
            # Settings this engine always trains with: bias none, plain (not rank-stabilised) scaling, nothing
            # but the adapter trained.
            "bias": ("none", parent.get("bias", "none")),
            "rsLoRA": (False, bool(parent.get("use_rslora", False))),
            "modules to save": ([], sorted(_as_list(parent.get("modules_to_save")))),
            }
    return [f"{what}: the fork has {mine!r}, the parent checkpoint {theirs!r}"
            for what, (mine, theirs) in ours.items() if mine != theirs]


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def refuse_mismatched_parent(lora: Any, adapter_dir: Path) -> None:
    """A TrainingError naming each difference between a fork's LoRA settings and its parent's adapter."""
    from training.types import TrainingError

    if problems := adapter_mismatches(lora, adapter_dir):
        raise TrainingError(f"the fork's LoRA settings differ from its parent checkpoint's adapter ({adapter_dir}): "
                            + "; ".join(problems) + ". Fork with the parent's LoRA settings")
