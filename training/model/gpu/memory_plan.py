"""The memory plan: what a run needs on each GPU, worked out from configs alone (no weights, no torch, no Django).

    python -m training plan --config FILE.json [--gpu-gib 80 --gpu-count 1]

From the base model's config.json (hidden size, layers, heads, kv heads, intermediate size, vocabulary, tied
embeddings), the LoRA settings, the trainer's token budget, dtype, gradient checkpointing and optimizer, and the
server's settings (max sequence length, concurrent sequences, vLLM's memory share), per GPU: the bytes of the
trainer's weights, the adapter with its gradients and AdamW state, the activations of one micro-batch, and the
inference server's weights and KV cache; a verdict (fits or not, by how much) and the change that would make it
fit. The launch page, the CLI and the engine's choices of `server.gpu_sharing: auto` and
`trainer.gradient_checkpointing: auto` all read this one function.

The activation terms are measured, not assumed: training/model/gpu/activation_probe.py runs one or two layers of the
architecture with the run's LoRA on CPU at a small width (no weights are read); where it cannot build the
architecture the plan falls back to assumed terms and says so. Everything else is counted from the configs
(docs/gpu.md says how the plan compares with measured peaks).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from training.config import RunConfig
from training.config.server_flags import share_flag
from training.model.gpu.activation_terms import Activations, activation_bytes, activations
from training.model.gpu.model_shape import DEFAULT_MAX_MODEL_LEN, ModelShape, read_shape  # noqa: F401 - read_shape: here too

GiB = 2**30
# Per training process: the CUDA context, cuBLAS workspaces and the caching allocator's slack.
TRAINER_OVERHEAD = 1 * GiB
# vLLM: its CUDA context, the activations of its profiling pass and CUDA graphs; kept even while asleep
# (SLEEPING_SERVER), when its weights are in CPU RAM and its KV cache is dropped.
SERVER_OVERHEAD = 2 * GiB
SLEEPING_SERVER = 1 * GiB
# bytes per parameter of the adapter in training: float32 weight + gradient + AdamW's two moments.
LORA_STATE_BYTES = 4 + 4 + 8
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
NF4_BYTES = 0.52  # 4-bit weights with their double-quantised scales (embeddings stay 16-bit)
SMALLEST_MICRO_BATCH = 512


def lora_params(shape: ModelShape, r: int, targets: list[str]) -> int:
    """Adapter parameters: r x (in + out) for each targeted projection of each layer."""
    return shape.layers * sum(r * (i + o) for name, (i, o) in shape.projections().items() if name in targets)


@dataclass
class TrainerNeed:
    weights: int
    lora_state: int
    activations: int
    overhead: int = TRAINER_OVERHEAD
    activation_terms: Activations | None = None  # the breakdown and whether it was measured

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
    gradient_checkpointing: bool = False  # as planned (`auto` resolved)
    checkpointing_reason: str = "as configured"
    problem: str | None = None  # a refusal that no GPU size would lift (a setting that defeats the plan)

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
        if self.problem:
            return self.problem
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
        out.append(f"gradient checkpointing: {'on' if self.gradient_checkpointing else 'off'} "
                   f"({self.checkpointing_reason})")
        out.append(self.sources())
        out.append(f"verdict: {self.verdict()}")
        out += [f"to fit: {a}" for a in self.advice] if self.fits is False else []
        return out

    def sources(self) -> str:
        """Which terms were measured and which assumed, in one line."""
        t = next((g.trainer for g in self.gpus if g.trainer), None)
        a = t.activation_terms if t else None
        if a is None:
            return "terms: no trainer on these GPUs"
        parts = (f"kept {gib(a.kept)}, then the larger of a layer's backward {gib(a.layer_peak)} and the log-prob "
                 f"chunk's {gib(a.logits_peak)}")
        measured = ("measured: activations by the probe of this architecture with this LoRA (" + parts + ")"
                    if a.measured else "assumed: activations from Qwen2's measured terms, the probe could not "
                    "build this architecture (" + parts + ")")
        counted = "counted from the configs: weights, adapter and optimizer, KV cache"
        assumed = "assumed: runtime (trainer 1 GiB per process, vLLM 2 GiB, 1 GiB asleep)"
        return f"terms: {measured}; {counted}; {assumed}"

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
    terms = activations(shape, tokens=config.grpo.micro_batch_tokens, dtype_bytes=dtype_bytes,
                        checkpointing=t.gradient_checkpointing is True, chunk_tokens=t.logprob_chunk_tokens,
                        lora_r=config.lora.r, lora_targets=config.lora.target_modules)
    return TrainerNeed(weights=weights, lora_state=lora, activations=terms.total, activation_terms=terms)


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
    plans for no GPU: the numbers only, no verdict. `server.gpu_sharing: auto` and
    `trainer.gradient_checkpointing: auto` are resolved here."""
    if config.trainer.gradient_checkpointing != "auto":
        plan = _plan_sharing(config, shape, gpu_totals, with_advice)
        plan.gradient_checkpointing = config.trainer.gradient_checkpointing is True
        return plan
    # auto: off (a third less compute) unless the plan needs it to fit.
    off = _plan_sharing(_with(config, "trainer", gradient_checkpointing=False), shape, gpu_totals, False)
    if off.fits is not False:
        off.checkpointing_reason = ("auto: the plan fits without it" if off.fits else
                                    "auto: no GPU to judge against yet; the worker's plan decides")
        return off
    on = _plan_sharing(_with(config, "trainer", gradient_checkpointing=True), shape, gpu_totals, with_advice)
    short = gib(off.shortfall)
    on.gradient_checkpointing = True
    on.checkpointing_reason = (f"auto: without it the run is {short} short" if on.fits else
                               f"auto: the run fits neither way; it needs less memory with it ({short} short "
                               "without)")
    return on


def _plan_sharing(config: RunConfig, shape: ModelShape, gpu_totals: list[int] | None,
                  with_advice: bool) -> MemoryPlan:
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
    if requested == "none" and shared:
        plan.problem = none_on_shared_gpu(config, shape, totals, shared[0])
    elif mode in ("split", "sleep") and (flag := share_flag(config.server.extra_args)):
        plan.problem = (f"server.extra_args sets vLLM's memory share ({flag}), which the memory plan sets "
                        f"('{mode}': vLLM and the trainer share GPU {shared[0]}); remove it")
    if shared and mode in ("split", "sleep") and totals:
        share_gpu = shared[0]
        plan.gpu_memory_utilization = share_of(server.total, totals[share_gpu]) if share_gpu < len(totals) else None
    elif requested == "split" and shared:
        plan.gpu_memory_utilization = config.server.gpu_memory_utilization
    if plan.fits is False and with_advice:
        plan.advice = advice(config, shape, plan, totals)
    return plan


def none_on_shared_gpu(config: RunConfig, shape: ModelShape, totals: list[int], gpu: int) -> str:
    """Why `server.gpu_sharing: none` cannot put vLLM beside the trainer: vLLM would ask for its default 0.9 of
    the card, whatever the trainer holds; the sentence names what the plan would do instead."""
    auto = plan_memory(_with(config, "server", gpu_sharing="auto"), shape, totals or None, with_advice=False)
    share = f", vLLM's share {auto.gpu_memory_utilization:.2f}" if auto.gpu_memory_utilization else ""
    choice = (f"the plan would share it as '{auto.sharing}'{share} ({auto.verdict()})"
              if auto.fits is not False else f"the plan does not fit it either way ({auto.verdict()})")
    return (f"server.gpu_sharing 'none' puts vLLM and the trainer on the same GPU {gpu} without a plan: vLLM "
            f"would take its default 0.9 of the card beside the trainer. {choice[0].upper()}{choice[1:]}. Set "
            "server.gpu_sharing to 'auto' (or 'split' or 'sleep'), or give vLLM a GPU of its own (server.gpus).")


def _with(config: RunConfig, section: str, **changes: Any) -> RunConfig:
    part = getattr(config, section)
    return config.model_copy(update={section: part.model_copy(update=changes)})


def _tokens_within(config: RunConfig, shape: ModelShape, budget: int) -> int:
    """The largest micro-batch (in tokens, below the configured one) whose activations fit `budget` bytes; 0 if
    none. Searched, not divided: the log-prob chunk's peak does not shrink with the micro-batch."""
    t = config.trainer
    lo, hi = 0, config.grpo.micro_batch_tokens - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        need = activation_bytes(shape, tokens=mid, dtype_bytes=DTYPE_BYTES.get(t.dtype, 2),
                                checkpointing=t.gradient_checkpointing is True, chunk_tokens=t.logprob_chunk_tokens,
                                lora_r=config.lora.r, lora_targets=config.lora.target_modules)
        lo, hi = (mid, hi) if need <= budget else (lo, mid - 1)
    return lo


def advice(config: RunConfig, shape: ModelShape, plan: MemoryPlan, totals: list[int]) -> list[str]:
    """The changes that would each, alone, make the plan fit (each checked by planning again), cheapest first,
    then the GPU size that would."""
    worst = max(plan.gpus, key=lambda g: -(g.spare or 0))
    short, t, s = plan.shortfall, worst.trainer, worst.server
    candidates: list[tuple[str, RunConfig]] = []
    if t and config.trainer.gradient_checkpointing is not True:
        on = _with(config, "trainer", gradient_checkpointing=True)
        candidates.append((f"turn on trainer.gradient_checkpointing (activations {gib(t.activations)} → "
                           f"{gib(trainer_need(on, shape).activations)})", on))
    if t:
        tokens = _tokens_within(config, shape, t.activations - short)
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
