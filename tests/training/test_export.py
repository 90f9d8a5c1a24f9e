"""A checkpoint merged into its base (issue 37): the export's greedy answers equal the adapter's on 20 prompts of
the tiny model, and the export loads with plain transformers in a process that never imports peft."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.types import TrainingError

PROMPTS = [f"New game. Board: {i} {i * 7 % 13} {i * 3 % 5}" for i in range(10)] + \
          [f"Question {i}: what is {i} plus {2 * i}?" for i in range(10)]
GREEDY = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model_dir, prompts = sys.argv[1], json.loads(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
out = []
for prompt in prompts:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        generated = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    out.append(generated[0, ids.shape[1]:].tolist())
print(json.dumps({"answers": out, "peft_imported": "peft" in sys.modules}))
"""


def _adapter(tiny_model_dir: Path, out: Path) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj"],
                                                  init_lora_weights=False))
    peft_model.save_pretrained(out)
    return out


def _adapter_answers(tiny_model_dir: Path, adapter: Path) -> list[list[int]]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    answers = []
    for prompt in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            generated = model.generate(input_ids=ids, max_new_tokens=12, do_sample=False,
                                       pad_token_id=tokenizer.pad_token_id)
        answers.append(generated[0, ids.shape[1]:].tolist())
    return answers


def test_the_merged_export_answers_as_the_adapter_does_and_loads_without_peft(tiny_model_dir, tmp_path):
    from training.model.export import merge_adapter

    adapter = _adapter(tiny_model_dir, tmp_path / "adapter")
    phases: list[tuple[str, float]] = []
    out = merge_adapter(base_model=str(tiny_model_dir), adapter_dir=adapter, out_dir=tmp_path / "merged",
                        progress=lambda phase, fraction: phases.append((phase, fraction)))
    assert [f for _, f in phases] == sorted(f for _, f in phases) and phases[-1] == ("done", 1.0)
    assert list(out.glob("*.safetensors")) and (out / "tokenizer_config.json").exists()
    assert not list(out.glob("adapter_*")) and not (tmp_path / "merged.partial").exists()
    loaded = subprocess.run([sys.executable, "-c", GREEDY, str(out), json.dumps(PROMPTS)], capture_output=True,
                            text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    report = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert report["peft_imported"] is False
    expected = _adapter_answers(tiny_model_dir, adapter)
    assert report["answers"] == expected
    base = subprocess.run([sys.executable, "-c", GREEDY, str(tiny_model_dir), json.dumps(PROMPTS)],
                          capture_output=True, text=True, timeout=300)
    assert json.loads(base.stdout.strip().splitlines()[-1])["answers"] != expected  # the adapter changes answers


def test_a_directory_without_an_adapter_is_refused_and_nothing_is_written(tiny_model_dir, tmp_path):
    from training.model.export import merge_adapter

    with pytest.raises(TrainingError, match="adapter_config.json is missing"):
        merge_adapter(base_model=str(tiny_model_dir), adapter_dir=tmp_path, out_dir=tmp_path / "merged",
                      progress=lambda *_: None)
    assert not (tmp_path / "merged").exists()


def test_the_cli_prints_its_progress_as_json_lines(tiny_model_dir, tmp_path):
    adapter = _adapter(tiny_model_dir, tmp_path / "adapter")
    proc = subprocess.run([sys.executable, "-m", "training", "export-merged", "--base", str(tiny_model_dir),
                           "--adapter", str(adapter), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines[-1] == {"kind": "export_progress", "phase": "done", "progress": 1.0}
