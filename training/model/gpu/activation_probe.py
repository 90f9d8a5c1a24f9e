"""The activation probe: what one decoder layer of a model's architecture, with the run's LoRA, keeps for the
backward pass and adds at the backward's peak, measured on CPU at a small width instead of assumed.

    from training.model.gpu.activation_probe import probe_terms
    terms = probe_terms(ProbeKey(model_type="qwen2", ...))   # cached per key; a fraction of a second each

How it measures (docs/gpu.md, "The activation terms"): the architecture is built from its transformers config
with every width scaled down by the same factor (hidden, intermediate and head sizes; head counts kept), random
weights, the run's LoRA through peft, and one or two decoder layers. A forward and backward pass of the engine's
own log-prob function (training.rl.grpo.token_logprobs, with its chunked output layer) runs over `PROBE_TOKENS`
tokens while two counters watch:

- autograd's saved tensors (`torch.autograd.graph.saved_tensors_hooks`): the bytes of every distinct storage the
  forward saves for the backward, the weights excluded. With gradient checkpointing these are each layer's inputs.
- live tensor bytes (a `TorchDispatchMode` that adds each new storage an operator allocates and subtracts it
  when its last tensor dies): the peak of the backward, beyond what the forward kept. The adapter's gradients
  are allocated before the pass, so only activations and their gradients count.

Two depths separate what each layer keeps from what the body outside the layers keeps; two widths separate
what grows with the hidden size from what does not (the LoRA rank's tensors, attention's per-head statistics);
a vocabulary large enough to dominate gives the log-prob chunk's backward peak per (chunk token x vocabulary
entry). Everything is per token: attention is measured with sdpa, whose saved state grows linearly with the
sequence (eager attention's score matrices do not, and are not counted).
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass
from typing import Any

PROBE_TOKENS = 32
PROBE_CHUNK = 8  # below PROBE_TOKENS: the chunks are recomputed in the backward, as in training
SMALL_VOCAB = 32  # too small for the logits to matter next to a layer
LARGE_VOCAB = 8192  # at least: large enough that the log-prob chunk's peak is the backward's peak
HEAD_DIMS = (4, 8)  # the two scaled head sizes (every width scales with them)


@dataclass(frozen=True)
class ProbeKey:
    """What the terms depend on: the architecture and its proportions, the LoRA shape, dtype, checkpointing."""
    model_type: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool
    lora_r: int
    lora_targets: tuple[str, ...]
    dtype: str  # bfloat16 | float16 | float32
    checkpointing: bool


@dataclass(frozen=True)
class Linear:
    """Bytes per token as a function of the hidden size: per_hidden x hidden + constant."""
    per_hidden: float
    constant: float

    def at(self, hidden: int) -> float:
        return max(0.0, self.per_hidden * hidden + self.constant)


@dataclass(frozen=True)
class ActivationTerms:
    kept_per_layer: Linear  # kept for the backward by each decoder layer, per token
    kept_outside: Linear  # kept by the rest of the body (final norm, the output layer's inputs), per token
    layer_peak: Linear  # what a layer's backward adds at its peak, per token (with checkpointing: the recompute)
    logits_peak: float  # the log-prob chunk's backward, per (chunk token x vocabulary entry)


class _LiveBytes:
    """Live bytes of the storages operators allocate, and their peak. Tensors that existed before (weights,
    inputs, preallocated gradients) are excluded by storage."""

    def __init__(self, existing: set[int]) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        tracker = self
        self.live = self.peak = 0
        self.owners: dict[int, list[int]] = {}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                for t in tree_leaves(out):
                    tracker._add(t, existing)
                return out

        self.mode = Mode()

    def _add(self, t: Any, existing: set[int]) -> None:
        import torch

        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if not key or not size or key in existing:
            return
        if key in self.owners:  # a view or an in-place result: the storage is counted once
            self.owners[key][0] += 1
        else:
            self.owners[key] = [1]
            self.live += size
            self.peak = max(self.peak, self.live)
        weakref.finalize(t, self._drop, key, size)

    def _drop(self, key: int, size: int) -> None:
        owners = self.owners.get(key)
        if owners is None:
            return
        owners[0] -= 1
        if owners[0] == 0:
            del self.owners[key]
            self.live -= size


def _scaled_model(key: ProbeKey, head_dim: int, layers: int, vocab: int) -> Any:
    """The architecture at head size `head_dim` (every width scaled alike), random weights, the run's LoRA."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    scale = head_dim / key.head_dim
    # Some configs insist that the hidden size divide by the head count (Gemma's heads are wider than that).
    hidden = max(key.heads, round(key.hidden * scale / key.heads) * key.heads)
    config = AutoConfig.for_model(
        key.model_type, hidden_size=hidden, intermediate_size=max(2, round(key.intermediate * scale)),
        num_attention_heads=key.heads, num_key_value_heads=key.kv_heads, head_dim=head_dim,
        num_hidden_layers=layers, vocab_size=vocab, tie_word_embeddings=False, max_position_embeddings=4 * PROBE_TOKENS,
        attention_bias=key.qkv_bias, use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    dtype = getattr(torch, key.dtype)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    if key.checkpointing:  # as the trainer does (training/model/adapter.py)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    targets = [t for t in key.lora_targets if any(n.endswith(t) for n, _ in model.named_modules())]
    model = get_peft_model(model, LoraConfig(r=key.lora_r, lora_alpha=2 * key.lora_r, target_modules=targets,
                                             task_type="CAUSAL_LM"))
    model.train()
    return model, hidden


def measure_pass(model: Any, vocab: int, *, tokens: int = PROBE_TOKENS, chunk_tokens: int = PROBE_CHUNK,
                 peak: bool = True) -> tuple[int, int, int]:
    """(saved, kept, peak) bytes of one forward and backward pass of the engine's log-prob function over `tokens`
    random tokens: autograd's saved storages, live bytes at the end of the forward, and the live peak during the
    backward (weights and the adapter's gradients excluded). `peak=False`: saved bytes only (kept and peak 0),
    without the per-operator tracking, which costs most of the probe's time."""
    import torch

    from training.model.logprobs import token_logprobs

    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    for p in model.parameters():
        if p.requires_grad:  # allocated up front: the adapter's gradients are the plan's adapter term
            p.grad = torch.zeros_like(p)
    existing = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), ids, attention]}
    existing |= {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in existing:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    tracker = _LiveBytes(existing)
    with tracker.mode if peak else contextlib.nullcontext():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = token_logprobs(model, ids, attention, chunk_tokens=chunk_tokens).sum()
        kept = tracker.peak = tracker.live
        loss.backward()
    return sum(saved.values()), kept, tracker.peak


@contextlib.contextmanager
def _restore_threads(threads: int) -> Any:
    import torch

    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _fit(points: list[tuple[int, float]]) -> Linear:
    """The line through two (hidden, bytes per token) points."""
    (h1, b1), (h2, b2) = points
    slope = (b2 - b1) / (h2 - h1)
    return Linear(slope, b1 - slope * h1)


@functools.lru_cache(maxsize=64)
def probe_terms(key: ProbeKey) -> ActivationTerms:
    """The measured terms for `key` (cached per process). Raises whatever transformers or peft raise for an
    architecture they cannot build; the memory plan then says its activation terms are assumed."""
    import torch

    layer, outside, peak = [], [], []
    threads = torch.get_num_threads()
    # Tensors this small gain nothing from several threads and lose much to their hand-offs (measured 5x), and
    # torch's CPU threads are this thread's setting: restored below.
    torch.set_num_threads(1)
    with torch.random.fork_rng(devices=[]), _restore_threads(threads):  # random weights must not move a run's seed
        torch.manual_seed(0)
        for head_dim in HEAD_DIMS:
            one, hidden = _scaled_model(key, head_dim, 1, SMALL_VOCAB)
            two, _ = _scaled_model(key, head_dim, 2, SMALL_VOCAB)
            saved1, _, _ = measure_pass(one, SMALL_VOCAB, peak=False)
            saved2, _, peak2 = measure_pass(two, SMALL_VOCAB)
            per_layer = (saved2 - saved1) / PROBE_TOKENS
            layer.append((hidden, per_layer))
            outside.append((hidden, saved1 / PROBE_TOKENS - per_layer))
            peak.append((hidden, (peak2 - saved2) / PROBE_TOKENS))
        # Wide enough that the chunk's logits outweigh a layer's backward several times at any architecture's
        # narrowest probe width (a layer's peak is under 150 bytes x hidden per token).
        vocab = max(LARGE_VOCAB, 64 * layer[0][0])
        wide, _ = _scaled_model(key, HEAD_DIMS[0], 1, vocab)
        saved, _, top = measure_pass(wide, vocab)
    return ActivationTerms(kept_per_layer=_fit(layer), kept_outside=_fit(outside), layer_peak=_fit(peak),
                           logits_peak=(top - saved) / (PROBE_CHUNK * vocab))
