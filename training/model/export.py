"""A checkpoint merged into its base model (issue 37): peft's `merge_and_unload` folds the LoRA weights into the
base's, and the result is saved as safetensors with the tokenizer and its chat template, so a serving stack loads
it with transformers alone (no peft). Written under a temporary name and renamed when complete.

Run: python -m training export-merged --base BASE --adapter DIR --out DIR  (one JSON progress line per phase on
stdout: {"kind": "export_progress", "phase", "progress"}).
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from training.types import TrainingError

Progress = Callable[[str, float], None]


def merge_adapter(*, base_model: str, adapter_dir: Path, out_dir: Path, progress: Progress) -> Path:
    """`out_dir` holding the merged model; TrainingError naming what is missing or wrong."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (adapter_dir / "adapter_config.json").exists():
        raise TrainingError(f"{adapter_dir} holds no adapter (adapter_config.json is missing)")
    progress("loading the base model", 0.05)
    # float32 on the CPU: merging in bf16 rounds the folded weights, and the export must answer as the adapter does.
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    progress("loading the adapter", 0.35)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    progress("merging done; saving safetensors", 0.6)
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    merged.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)  # its chat template with it
    progress("checking the saved files", 0.9)
    if not any(staging.glob("*.safetensors")):
        raise TrainingError(f"the merged model was not written as safetensors in {staging}")
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)
    progress("done", 1.0)
    return out_dir
