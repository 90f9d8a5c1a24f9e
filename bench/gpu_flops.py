"""What `make gpu-check` divides by and what it counts: the card's dense bf16 peak from its datasheet, and the
FLOPs of a GRPO step as our trainer computes them.

The FLOPs follow `training.rl.grpo.token_logprobs` and the frozen base model under LoRA:
- decoder layers, per real (unpadded) token: forward 2 x W and backward 2 x W for the input gradients (W = the
  layers' projection weights; frozen, so no weight gradient), plus 6 x P for the adapter (P = LoRA parameters:
  forward, input gradient, weight gradient);
- attention, per sequence of n tokens and layer: 2 x d x n^2 forward (QK^T and AV, causal: half the square;
  d = heads x head size) and twice that backward;
- the output layer only over the trained (assistant) positions: the trainer gathers those hidden states before
  the head, so 2 x hidden x vocab forward and as much backward (input gradient only) per trained position.
Recomputation (gradient checkpointing, the log-prob chunks) is not counted: MFU counts the model's FLOPs, not the
hardware's, so a checkpointed step shows about a quarter less than the card did.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.model.batching import Row
    from training.model.gpu.model_shape import ModelShape

# Dense (not sparse) bf16 tensor-core peaks in TFLOP/s from NVIDIA's datasheets, by a pattern of
# torch.cuda.get_device_name(); first match wins, so the more specific variant comes first.
CARDS: tuple[tuple[str, str, float], ...] = (
    (r"H100.*NVL", "H100 NVL", 835.0),
    (r"H100.*PCIe", "H100 PCIe", 756.0),
    (r"H100", "H100 SXM", 989.0),
    (r"H200.*NVL", "H200 NVL", 835.0),
    (r"H200", "H200", 989.0),  # GH200's Hopper GPU too
    (r"A100", "A100", 312.0),  # 40 GB and 80 GB, SXM and PCIe alike
    (r"L40S\b", "L40S", 362.0),
    (r"L40\b", "L40", 181.0),
    (r"L4\b", "L4", 121.0),
    (r"A10\b", "A10", 125.0),
)


def card_peak(device_name: str) -> tuple[str, float | None]:
    """(the card as the table names it, its dense bf16 peak in FLOP/s); None for a card not in the table."""
    for pattern, label, tflops in CARDS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return label, tflops * 1e12
    return device_name, None


def lora_params_per_layer(shape: ModelShape, r: int, targets: list[str] | tuple[str, ...]) -> int:
    return sum(r * (i + o) for name, (i, o) in shape.projections().items() if name in targets)


def step_flops(shape: ModelShape, rows: list[Row], *, lora_r: int,
               lora_targets: list[str] | tuple[str, ...]) -> dict[str, float]:
    """The model FLOPs of one optimizer step over `rows` (one epoch), by part."""
    weights = sum(i * o for i, o in shape.projections().values())
    lora = lora_params_per_layer(shape, lora_r, lora_targets)
    tokens = sum(len(r.input_ids) for r in rows)
    trained = sum(sum(r.mask[1:]) for r in rows)  # position 0 predicts nothing (token_logprobs)
    width = shape.heads * shape.head_dim
    layers = shape.layers * tokens * (4 * weights + 6 * lora)
    attention = shape.layers * 6 * width * sum(len(r.input_ids) ** 2 for r in rows)
    head = 4 * shape.hidden * shape.vocab * trained
    return {"layers": float(layers), "attention": float(attention), "head": float(head),
            "total": float(layers + attention + head), "tokens": float(tokens), "trained_tokens": float(trained)}
