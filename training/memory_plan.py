"""The memory plan: what a run needs on each GPU, worked out from configs alone (no weights, no torch, no Django).

    python -m training plan --config FILE.json [--gpu-gib 80 --gpu-count 1]

From the base model's config.json (hidden size, layers, heads, kv heads, intermediate size, vocabulary, tied
embeddings), the LoRA settings, the trainer's token budget, dtype, gradient checkpointing and optimizer, and the
server's settings (max sequence length, concurrent sequences, vLLM's memory share), per GPU: the bytes of the
trainer's weights, the adapter with its gradients and AdamW state, the activations of one micro-batch, and the
inference server's weights and KV cache; a verdict (fits or not, by how much) and the change that would make it
fit. The launch page, the CLI and the engine's choice of `server.gpu_sharing: auto` all read this one function.

The estimate is an upper one by design (docs/gpu.md says how it compares with measured peaks).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.config import RunConfig
from training.errors import TrainingError

GiB = 2**30
# Per training process: the CUDA context, cuBLAS workspaces and the caching allocator's slack.
TRAINER_OVERHEAD = 1 * GiB
# vLLM: its CUDA context, the activations of its profiling pass and CUDA graphs; kept even while asleep
# (SLEEPING_SERVER), when its weights are in CPU RAM and its KV cache is dropped.
SERVER_OVERHEAD = 2 * GiB
SLEEPING_SERVER = 1 * GiB
# The tokens per sequence the plan budgets the KV cache for when server.max_model_len is unset.
DEFAULT_MAX_MODEL_LEN = 4096
# bytes per parameter of the adapter in training: float32 weight + gradient + AdamW's two moments.
LORA_STATE_BYTES = 4 + 4 + 8
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
NF4_BYTES = 0.52  # 4-bit weights with their double-quantised scales (embeddings stay 16-bit)
SMALLEST_MICRO_BATCH = 512


@dataclass(frozen=True)
class ModelShape:
    """The fields of a decoder-only model's config.json that decide its memory."""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool
    max_positions: int

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ModelShape":
        try:
            hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
            return cls(hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
                       kv_heads=int(cfg.get("num_key_value_heads") or heads),
                       head_dim=int(cfg.get("head_dim") or hidden // heads),
                       intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
                       tied=bool(cfg.get("tie_word_embeddings", False)),
                       # Qwen2's config does not say it, but its q/k/v projections carry a bias.
                       qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") in ("qwen2", "qwen2_moe"))),
                       max_positions=int(cfg.get("max_position_embeddings") or DEFAULT_MAX_MODEL_LEN))
        except (KeyError, TypeError, ValueError) as err:
            raise TrainingError(f"the base model's config.json lacks a field the memory plan needs: {err}") from None

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer, by its module name."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}

    def linear_params(self) -> int:
        """Parameters of the decoder layers' projections (what 4-bit quantisation shrinks)."""
        per_layer = sum(i * o for i, o in self.projections().values())
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return self.layers * (per_layer + bias)

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        norms = self.layers * 2 * self.hidden + self.hidden
        return self.linear_params() + embeddings + norms

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes  # keys and values


def read_shape(base_model: str) -> ModelShape:
    """The shape from the base model's config.json: a directory's, or the local Hugging Face cache's."""
    path = Path(base_model).expanduser() / "config.json"
    if not path.is_file():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(base_model, "config.json")
        except ValueError:  # not a repo id
            cached = None
        if not isinstance(cached, str):
            raise TrainingError(f"no config.json for base model {base_model!r} (neither a directory nor in the "
                                "local Hugging Face cache): the memory plan needs its shape")
        path = Path(cached)
    try:
        return ModelShape.from_config(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        raise TrainingError(f"cannot read {path}: {err}") from None


def lora_params(shape: ModelShape, r: int, targets: list[str]) -> int:
    """Adapter parameters: r x (in + out) for each targeted projection of each layer."""
    return shape.layers * sum(r * (i + o) for name, (i, o) in shape.projections().items() if name in targets)


def activation_bytes(shape: ModelShape, *, tokens: int, dtype_bytes: int, checkpointing: bool,
                     chunk_tokens: int) -> int:
    """Upper estimate of one micro-batch of `tokens` padded tokens (weights excluded).

    Per token and layer a decoder layer keeps about 34 hidden-sized tensors for its backward (attention
    projections, the MLP's wider intermediates, norms, residuals); with checkpointing only the layer's input is
    kept and one layer at a time is recomputed. The log-prob chunk's backward holds about 5 float32 copies of its
    logits (the head's output, its float copy, the softmax, and their gradients).
    """
    per_token = shape.hidden * dtype_bytes * ((shape.layers + 34) if checkpointing else shape.layers * 34)
    return tokens * per_token + chunk_tokens * shape.vocab * 4 * 5


@dataclass
class TrainerNeed:
    weights: int
    lora_state: int
    activations: int
    overhead: int = TRAINER_OVERHEAD

    @property
    def resident(self) -> int:
        """Held between steps (what a waking vLLM finds taken)."""
        return self.weights + self.lora_state + self.overhead

    @property
    def peak(self) -> int:
        return self.resident + self.activations


@dataclass
class ServerNeed:
    weights: int
    kv_cache: int
    kv_tokens: int
    overhead: int = SERVER_OVERHEAD

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead


@dataclass
class GpuPlan:
    index: int
    total: int | None  # None: no GPU of known size (the plan then only counts)
    trainer: TrainerNeed | None = None
    server: ServerNeed | None = None
    need: int = 0  # the most this GPU holds at once, under the sharing mode

    @property
    def spare(self) -> int | None:
        return None if self.total is None else self.total - self.need


@dataclass
class MemoryPlan:
    sharing: str  # none | split | sleep (auto resolved) | cpu
    reason: str
    gpus: list[GpuPlan]
    trainer_gpus: list[int]
    server_gpus: list[int] | None  # None: the server is not on a GPU this plan knows of (local, external)
    gpu_memory_utilization: float | None = None  # vLLM's share, where the plan sets it
    advice: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        spares = [g.spare for g in self.gpus if g.spare is not None]
        return None if not spares else min(spares) >= 0

    @property
    def shortfall(self) -> int:
        return max([0] + [-(g.spare or 0) for g in self.gpus])

    def verdict(self) -> str:
        if self.fits is None:
            return "no GPU to plan against: the numbers are what the run would need"
        if self.fits:
            spare = min(g.spare for g in self.gpus if g.spare is not None)
            return f"fits, with {gib(spare)} spare on the fullest GPU"
        return f"does not fit: {gib(self.shortfall)} short on the fullest GPU"

    def refusal(self) -> str | None:
        """A sentence a person can act on, or None when the plan fits (or there is no GPU to judge)."""
        if self.fits is not False:
            return None
        worst = max(self.gpus, key=lambda g: -(g.spare or 0))
        parts = []
        if worst.trainer:
            t = worst.trainer
            parts.append(f"the trainer needs {gib(t.peak)} (weights {gib(t.weights)}, adapter and optimizer "
                         f"{gib(t.lora_state)}, activations {gib(t.activations)}, runtime {gib(t.overhead)})")
        if worst.server:
            s = worst.server
            parts.append(f"vLLM needs {gib(s.total)} (weights {gib(s.weights)}, KV cache {gib(s.kv_cache)} for "
                         f"{s.kv_tokens} tokens, runtime {gib(s.overhead)})")
        mode = {"split": "side by side", "sleep": "taking turns (sleep mode)"}.get(self.sharing, "")
        return (f"the run does not fit on GPU {worst.index} ({gib(worst.total or 0)}{', ' + mode if mode else ''}): "
                f"{' and '.join(parts)}; {gib(self.shortfall)} short. "
                f"To fit: {'; or '.join(self.advice) or 'use a larger GPU'}.")

    def lines(self) -> list[str]:
        out = [f"GPU sharing: {self.sharing} ({self.reason})"]
        if self.gpu_memory_utilization is not None:
            out.append(f"vLLM --gpu-memory-utilization {self.gpu_memory_utilization:.2f}")
        for g in self.gpus:
            size = gib(g.total) if g.total is not None else "size unknown"
            out.append(f"GPU {g.index} ({size}): needs {gib(g.need)} at most")
            if g.trainer:
                t = g.trainer
                out.append(f"  trainer: weights {gib(t.weights)}, adapter + optimizer {gib(t.lora_state)}, "
                           f"activations {gib(t.activations)}, runtime {gib(t.overhead)} = {gib(t.peak)}")
            if g.server:
                s = g.server
                out.append(f"  vLLM: weights {gib(s.weights)}, KV cache {gib(s.kv_cache)} ({s.kv_tokens} tokens), "
                           f"runtime {gib(s.overhead)} = {gib(s.total)}")
        out.append(f"verdict: {self.verdict()}")
        out += [f"to fit: {a}" for a in self.advice] if self.fits is False else []
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits, "shortfall": self.shortfall, "verdict": self.verdict(),
                "refusal": self.refusal()}


def gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def trainer_need(config: RunConfig, shape: ModelShape, *, on_gpu: bool = True) -> TrainerNeed:
    t = config.trainer
    dtype_bytes = DTYPE_BYTES.get(t.dtype, 2 if on_gpu else 4)  # auto: bf16 on a GPU, float32 on CPU
    if t.load_in_4bit:
        weights = int(shape.linear_params() * NF4_BYTES) + (shape.params() - shape.linear_params()) * 2
    else:
        weights = shape.params() * dtype_bytes
    if t.distributed == "fsdp":  # sharded over the processes; one layer at a time is gathered whole
        processes = t.launch_processes()
        weights = weights // processes + (shape.params() - shape.vocab * shape.hidden) // shape.layers * dtype_bytes
    lora = lora_params(shape, config.lora.r, config.lora.target_modules) * LORA_STATE_BYTES
    activations = activation_bytes(shape, tokens=config.grpo.micro_batch_tokens, dtype_bytes=dtype_bytes,
                                   checkpointing=t.gradient_checkpointing, chunk_tokens=t.logprob_chunk_tokens)
    return TrainerNeed(weights=weights, lora_state=lora, activations=activations)


def kv_tokens(config: RunConfig, shape: ModelShape) -> int:
    s = config.server
    length = s.max_model_len or min(DEFAULT_MAX_MODEL_LEN, shape.max_positions)
    sequences = s.max_num_seqs or config.grpo.group_size * config.grpo.groups_per_step
    return length * sequences


def server_need(config: RunConfig, shape: ModelShape, tensor_parallel: int = 1) -> ServerNeed:
    tokens = kv_tokens(config, shape)
    return ServerNeed(weights=shape.params() * 2 // tensor_parallel,  # vLLM serves in bf16
                      kv_cache=tokens * shape.kv_bytes_per_token() // tensor_parallel, kv_tokens=tokens)


def share_of(need: int, total: int) -> float:
    """vLLM's --gpu-memory-utilization for `need` bytes of a `total`-byte GPU: rounded up to a hundredth."""
    return min(0.95, math.ceil(need / total * 100) / 100)


def placement(config: RunConfig, gpu_count: int) -> tuple[list[int], list[int] | None]:
    """Which GPUs the trainer and the (vLLM) server take. A server left without GPUs gets the first one the
    trainer does not use, else shares the trainer's first."""
    processes = config.trainer.launch_processes()
    trainer = list(config.trainer.gpus or range(processes))
    if config.server.kind != "vllm":
        return trainer, None
    if config.server.gpus is not None:
        return trainer, list(config.server.gpus)
    free = [g for g in range(gpu_count) if g not in trainer]
    return trainer, free[:1] or trainer[:1]


def plan_memory(config: RunConfig, shape: ModelShape, gpu_totals: list[int] | None, *,
                with_advice: bool = True) -> MemoryPlan:
    """The plan for `config` on GPUs of these sizes in bytes (the worker's visible GPUs, in order); None or []
    plans for no GPU: the numbers only, no verdict. `server.gpu_sharing: auto` is resolved here."""
    totals = list(gpu_totals or [])
    trainer_gpus, server_gpus = placement(config, max(len(totals), 1))
    trainer = trainer_need(config, shape, on_gpu=config.device != "cpu")
    server = server_need(config, shape, len(server_gpus)) if server_gpus is not None else None
    shared = sorted(set(trainer_gpus) & set(server_gpus or []))
    requested = config.server.gpu_sharing
    if not totals and config.device == "cpu":
        mode, reason = "cpu", "the trainer runs on CPU"
    elif server is None:
        mode, reason = "none", f"the {config.server.kind} server is not on the trainer's GPUs"
    elif not shared:
        mode, reason = "none", "vLLM and the trainer have GPUs of their own"
    elif requested != "auto":
        mode, reason = requested, "as configured"
    else:
        mode, reason = "split", "vLLM and the trainer fit side by side"  # checked below
    indices = sorted(set(trainer_gpus) | set(server_gpus or []))

    def build(mode: str) -> list[GpuPlan]:
        plans = []
        for i in indices:
            total = totals[i] if i < len(totals) else None
            g = GpuPlan(i, total, trainer if i in trainer_gpus else None, server if i in (server_gpus or []) else None)
            if g.trainer and g.server and mode == "sleep":
                g.need = max(g.trainer.peak + SLEEPING_SERVER, g.trainer.resident + g.server.total)
            else:
                g.need = (g.trainer.peak if g.trainer else 0) + (g.server.total if g.server else 0)
            plans.append(g)
        return plans

    gpus = build(mode)
    if requested == "auto" and shared and totals:
        plan = MemoryPlan(mode, reason, gpus, trainer_gpus, server_gpus)
        if not plan.fits:
            mode, reason = "sleep", "vLLM and the trainer do not fit side by side, so they take turns"
            gpus = build(mode)
    elif requested == "auto" and shared:
        mode, reason = "split", "no GPU to measure: split assumed"
    plan = MemoryPlan(mode, reason, gpus, trainer_gpus, server_gpus)
    if shared and mode in ("split", "sleep") and totals:
        share_gpu = shared[0]
        plan.gpu_memory_utilization = share_of(server.total, totals[share_gpu]) if share_gpu < len(totals) else None
    elif requested == "split" and shared:
        plan.gpu_memory_utilization = config.server.gpu_memory_utilization
    if plan.fits is False and with_advice:
        plan.advice = advice(config, shape, plan, totals)
    return plan


def _with(config: RunConfig, section: str, **changes: Any) -> RunConfig:
    part = getattr(config, section)
    return config.model_copy(update={section: part.model_copy(update=changes)})


def advice(config: RunConfig, shape: ModelShape, plan: MemoryPlan, totals: list[int]) -> list[str]:
    """The changes that would each, alone, make the plan fit (each checked by planning again), cheapest first,
    then the GPU size that would."""
    worst = max(plan.gpus, key=lambda g: -(g.spare or 0))
    short, t, s = plan.shortfall, worst.trainer, worst.server
    candidates: list[tuple[str, RunConfig]] = []
    if t and not config.trainer.gradient_checkpointing:
        on = _with(config, "trainer", gradient_checkpointing=True)
        candidates.append((f"turn on trainer.gradient_checkpointing (activations {gib(t.activations)} → "
                           f"{gib(trainer_need(on, shape).activations)})", on))
    if t:
        dtype_bytes = DTYPE_BYTES.get(config.trainer.dtype, 2)
        per_token = activation_bytes(shape, tokens=1, dtype_bytes=dtype_bytes,
                                     checkpointing=config.trainer.gradient_checkpointing, chunk_tokens=0)
        tokens = config.grpo.micro_batch_tokens - math.ceil(short / per_token)
        if tokens >= SMALLEST_MICRO_BATCH:
            candidates.append((f"lower grpo.micro_batch_tokens from {config.grpo.micro_batch_tokens} to {tokens}",
                               _with(config, "grpo", micro_batch_tokens=tokens)))
    if s:
        sequences = config.server.max_num_seqs or config.grpo.group_size * config.grpo.groups_per_step
        per_seq = s.kv_cache // max(sequences, 1)
        fewer = sequences - math.ceil(short / per_seq) if per_seq else 0
        if fewer >= 1:
            candidates.append((f"set server.max_num_seqs to {fewer} (the KV cache of fewer sequences at once; now "
                               f"{sequences})", _with(config, "server", max_num_seqs=fewer)))
        if plan.sharing == "split":
            candidates.append(("set server.gpu_sharing to 'sleep' (vLLM sleeps while the trainer steps)",
                               _with(config, "server", gpu_sharing="sleep")))
    if t and not config.trainer.load_in_4bit:
        candidates.append((f"set trainer.load_in_4bit (QLoRA: the trainer's weights {gib(t.weights)} → about "
                           f"{gib(t.weights * NF4_BYTES / 2)})", _with(config, "trainer", load_in_4bit=True)))
    out = [why for why, changed in candidates
           if plan_memory(changed, shape, totals, with_advice=False).fits]
    if worst.total:
        out.append(f"a GPU with at least {gib(worst.need)} (this one has {gib(worst.total)})")
    return out
