"""`make gpu-check` (bench/gpu_check.py) on a CPU at the tiny size, so the script cannot rot without a GPU: it
fills the token budget, samples unseeded choices in one batch, counts MFU from the trained tokens' FLOPs and
writes its table between the docs' markers; and the end-to-end step runs against the judge double."""
from __future__ import annotations

import json

import pytest

from bench.gpu_check import BEGIN, END, main
from bench.gpu_flops import card_peak, step_flops
from bench.gpu_step import end_to_end_step, step_table
from training.model.gpu.model_shape import ModelShape
from training.model.batching import Row


@pytest.mark.parametrize("name, label, tflops", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989), ("NVIDIA H100 PCIe", "H100 PCIe", 756),
    ("NVIDIA H100 NVL", "H100 NVL", 835), ("NVIDIA H200", "H200", 989), ("NVIDIA A100-SXM4-40GB", "A100", 312),
    ("NVIDIA A100 80GB PCIe", "A100", 312), ("NVIDIA L4", "L4", 121), ("NVIDIA L40S", "L40S", 362),
])
def test_known_cards_are_divided_by_their_datasheet_dense_bf16_peak(name, label, tflops):
    assert card_peak(name) == (label, tflops * 1e12)


def test_an_unknown_card_has_no_peak_rather_than_a_guessed_one():
    assert card_peak("NVIDIA A10G") == ("NVIDIA A10G", None)


def test_the_output_layer_is_counted_over_the_trained_positions_only():
    shape = ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=1000,
                       tied=True, qkv_bias=False, max_positions=512)
    prompt_heavy = [Row([1] * 100, [0] * 90 + [1] * 10, 1.0, [])]
    all_trained = [Row([1] * 100, [0] + [1] * 99, 1.0, [])]
    few, many = (step_flops(shape, rows, lora_r=8, lora_targets=["q_proj", "v_proj"])
                 for rows in (prompt_heavy, all_trained))
    assert few["head"] == 4 * 64 * 1000 * 10 and many["head"] == 4 * 64 * 1000 * 99
    assert few["layers"] == many["layers"] and few["attention"] == many["attention"]
    # layers: 100 tokens x 2 layers x (4 x projection weights + 6 x LoRA parameters of q and v)
    weights = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128
    assert few["layers"] == 100 * 2 * (4 * weights + 6 * 8 * ((64 + 64) + (64 + 32)))


def test_the_quick_gpu_check_fills_the_budget_batches_sampling_and_writes_its_table_into_the_docs(tmp_path, capsys):
    docs = tmp_path / "gpu.md"
    docs.write_text(f"# before\n{BEGIN}\nold table\n{END}\nafter\n")
    out = tmp_path / "gpu_check.json"
    assert main(["--quick", "--write-docs", "--docs", str(docs), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    (tiny,) = result["sizes"]
    assert tiny["budget_fill"] == 1.0 and tiny["micro_batch_tokens"] == 512  # 2 sequences x 256 tokens a pass
    assert tiny["micro_batches"] == tiny["tokens"] // 512
    assert tiny["sampling"]["sequences"] == 4 and tiny["sampling"]["tokens"] == 4 * 8
    assert tiny["sampling"]["batches"] == [4]  # unseeded: the 4 choices sampled together, not one at a time
    assert result["card_peak_tflops"] is None and tiny["mfu"] is None  # a CPU is no card of the table
    assert tiny["mfu_matmul"] > 0 and tiny["flops"]["head"] < tiny["flops"]["layers"]
    text = docs.read_text()
    assert text.startswith(f"# before\n{BEGIN}\ncard: cpu") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text and "| tiny | 0.01B | 512 (100%) |" in text
    assert "[gpu-check +" in capsys.readouterr().out  # progress lines


def test_the_end_to_end_step_times_each_stage_against_the_judge_double_on_a_cpu():
    step = end_to_end_step(quick=True)
    assert step["step"] == 2 and step["trained_sequences"] > 0 and step["judge"].startswith("the judge double"), step
    assert all(step[k] > 0 for k in ("rollouts_s", "judge_s", "training_s", "adapter_load_s", "step_s")), step
    assert step["gpu_idle_share"] is None and step["idle_source"].startswith("not measured")
    assert "| rollouts (incl. judge) |" in step_table(step)
