"""The memory plan's activation terms for one micro-batch: from the activation probe (activation_probe.py) where
it can build the architecture, else from assumed terms, and the plan says which (training/model/gpu/memory_plan.py)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.model.gpu.activation_probe import ActivationTerms
    from training.model.gpu.model_shape import ModelShape

log = logging.getLogger(__name__)


# Assumed only where the probe cannot build the architecture: Qwen2's measured terms (LoRA r16 on every
# projection, 2-byte weights) in bytes per token x hidden: kept per layer, kept outside the layers, a layer's
# backward peak; by gradient checkpointing. The log-prob chunk: 4 float32 copies of its logits.
ASSUMED_TERMS = {False: (90.0, 3.0, 25.0), True: (2.0, 6.0, 120.0)}
ASSUMED_LOGITS_BYTES = 16.0
ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PROBE_DTYPES = {4: "float32", 2: "bfloat16"}


@dataclass(frozen=True)
class Activations:
    """One micro-batch's activation memory: what the forward keeps for the backward, and the two transient
    peaks of the backward (a decoder layer's, the log-prob chunk's), which never coexist."""
    kept: int
    layer_peak: int
    logits_peak: int
    measured: bool  # from the activation probe; False: the assumed terms

    @property
    def total(self) -> int:
        # The chunked log-prob backward ends before the last layer's backward starts: the larger peak, not both.
        return self.kept + max(self.layer_peak, self.logits_peak)


def _probed(shape: ModelShape, dtype_bytes: int, checkpointing: bool, lora_r: int,
            lora_targets: tuple[str, ...]) -> ActivationTerms | None:
    """The probe's terms for this shape, or None where it cannot measure (unknown architecture, no torch)."""
    if not shape.model_type:
        return None
    try:
        from training.model.gpu.activation_probe import ProbeKey, probe_terms

        return probe_terms(ProbeKey(
            model_type=shape.model_type, hidden=shape.hidden, intermediate=shape.intermediate, heads=shape.heads,
            kv_heads=shape.kv_heads, head_dim=shape.head_dim, qkv_bias=shape.qkv_bias, lora_r=lora_r,
            lora_targets=tuple(sorted(lora_targets)), dtype=_PROBE_DTYPES.get(dtype_bytes, "bfloat16"),
            checkpointing=checkpointing))
    except Exception:  # noqa: BLE001 - any failure to build the architecture means: assume, and say so
        log.warning("activation probe failed for %s; the plan assumes its activation terms", shape.model_type,
                    exc_info=True)
        return None


def activations(shape: ModelShape, *, tokens: int, dtype_bytes: int, checkpointing: bool, chunk_tokens: int,
                lora_r: int = 16, lora_targets: tuple[str, ...] | list[str] = ALL_PROJECTIONS) -> Activations:
    """One micro-batch of `tokens` padded tokens (weights and the adapter's state excluded), every token trained
    (an upper bound: only the agent's turns are). Without checkpointing every layer keeps what it saved; with
    it, each layer keeps its input and one layer at a time is recomputed in the backward."""
    terms = _probed(shape, dtype_bytes, checkpointing, lora_r, tuple(lora_targets))
    chunk = min(chunk_tokens, tokens)
    if terms is not None:
        per_layer, outside = terms.kept_per_layer.at(shape.hidden), terms.kept_outside.at(shape.hidden)
        return Activations(kept=int(tokens * (shape.layers * per_layer + outside)),
                           layer_peak=int(tokens * terms.layer_peak.at(shape.hidden)),
                           logits_peak=int(chunk * shape.vocab * terms.logits_peak), measured=True)
    per_layer, outside, peak = (b * shape.hidden * dtype_bytes / 2 for b in ASSUMED_TERMS[checkpointing])
    return Activations(kept=int(tokens * (shape.layers * per_layer + outside)), layer_peak=int(tokens * peak),
                       logits_peak=int(chunk * shape.vocab * ASSUMED_LOGITS_BYTES), measured=False)


def activation_bytes(shape: ModelShape, *, tokens: int, dtype_bytes: int, checkpointing: bool, chunk_tokens: int,
                     lora_r: int = 16, lora_targets: tuple[str, ...] | list[str] = ALL_PROJECTIONS) -> int:
    """The peak of `activations(...)` in bytes."""
    return activations(shape, tokens=tokens, dtype_bytes=dtype_bytes, checkpointing=checkpointing,
                       chunk_tokens=chunk_tokens, lora_r=lora_r, lora_targets=lora_targets).total
