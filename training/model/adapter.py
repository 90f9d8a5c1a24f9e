"""The adapter half of a trainer, as every run kind trains it: a peft LoRA adapter on the base model (4-bit or
not, gradient checkpointing or not), its AdamW optimizer, its log-probs through the (DDP/FSDP-wrapped) policy
module, and its files: the adapter alone, the optimizer state, resume and fork (`AdapterTrainer`). Also the
device, dtype and memory helpers a run needs before and between steps (`pick_device`, `resolve_dtype`,
`release_cached_memory`, `step_memory_bytes`).

A run kind subclasses `AdapterTrainer` with its own step: GRPO's `Trainer` (training/rl/trainer.py), SFT's
`SFTTrainer` (training/sft/trainer.py). Log-probs are the model package's `token_logprobs`, so both kinds
compute one thing one way.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import torch

from training.config import ChatConfig, LoraConfig, TrainerConfig
from training.model.batching import Row, pad_batch
from training.model.chat_format import end_of_turn_ids, pad_token_id
from training.model.chat_templates import install
from training.model.gpu import distributed
from training.model.logprobs import token_logprobs
from training.types import TrainingError


def pick_device(device: str, *, require_gpu: bool = False) -> str:
    """auto -> cuda when present; refuses cuda without CUDA, and CPU at all when `require_gpu` (GPU workers)."""
    resolved = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if resolved.startswith("cuda") and not torch.cuda.is_available():
        raise TrainingError(f"device {device!r} asks for CUDA, but no CUDA device is visible to this process")
    if require_gpu and not resolved.startswith("cuda"):
        raise TrainingError(f"device {device!r} resolves to {resolved!r}, and this worker requires a GPU "
                            "(trainer.require_gpu): refusing to train on CPU")
    return resolved


def release_cached_memory(device: str) -> None:
    """Hands the memory PyTorch's caching allocator keeps after a step back to the driver, so that a vLLM
    waking up on the same GPU can allocate its KV cache again."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def resolve_dtype(name: str, device: str) -> torch.dtype:
    if name == "auto":
        cuda = device.startswith("cuda") and torch.cuda.is_available()
        return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def step_memory_bytes(config: Any, *, tokens: int, dtype: torch.dtype, checkpointing: bool,
                      chunk_tokens: int, lora: LoraConfig | None = None) -> int:
    """Upper estimate of the activation memory of one micro-batch of `tokens` padded tokens (weights excluded):
    the memory plan's (training/model/gpu/memory_plan.py), for a loaded model's config."""
    from training.model.gpu.memory_plan import ModelShape, activation_bytes

    lora = lora or LoraConfig()
    return activation_bytes(ModelShape.from_config(config.to_dict()), tokens=tokens,
                            dtype_bytes=torch.finfo(dtype).bits // 8, checkpointing=checkpointing,
                            chunk_tokens=chunk_tokens, lora_r=lora.r, lora_targets=lora.target_modules)


def _fused_ok(params: list[torch.nn.Parameter]) -> bool:
    """AdamW's fused kernel (one call for every adapter tensor, not a Python loop over them) where torch has it."""
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


class _PolicyLogprobs(torch.nn.Module):
    """The forward pass DDP/FSDP wrap: trained-position log-probs of the policy."""

    def __init__(self, model: torch.nn.Module, temperature: float, chunk_tokens: int) -> None:
        super().__init__()
        self.model, self.temperature, self.chunk_tokens = model, temperature, chunk_tokens

    def forward(self, input_ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor,
                reference: bool = False) -> torch.Tensor:
        # The reference pass goes through here too: under FSDP the weights exist whole only inside forward.
        with self.model.disable_adapter() if reference else contextlib.nullcontext():
            return token_logprobs(self.model, input_ids, attention, mask, temperature=self.temperature,
                                  chunk_tokens=self.chunk_tokens)


class AdapterTrainer:
    """The base model with a LoRA adapter and the adapter's optimizer; a run kind adds its step.

    `learning_rate`, `adam_betas` and `weight_decay` are the AdamW settings; `micro_batch_tokens` bounds one
    forward pass (what `step_bytes` estimates); `temperature` is the sampler's, by which the policy's logits
    are divided."""

    def __init__(self, base_model: str, lora: LoraConfig, *, learning_rate: float,
                 adam_betas: tuple[float, float], weight_decay: float, micro_batch_tokens: int,
                 device: str = "cpu", seed: int = 0, options: TrainerConfig | None = None,
                 temperature: float = 1.0, chat: ChatConfig | None = None) -> None:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model
        from transformers import AutoTokenizer, GenerationConfig

        torch.manual_seed(seed)
        self.options, self.lora, self.micro_batch_tokens = options or TrainerConfig(), lora, micro_batch_tokens
        distributed.init_from_env(device, self.options.gpus, self.options.collective_timeout_s)
        self.device = distributed.local_device(device, self.options.gpus)
        self.dtype = resolve_dtype(self.options.dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(base_model)
        try:
            generation = GenerationConfig.from_pretrained(base_model)
        except OSError:  # no generation_config.json: the tokenizer's EOS alone ends a turn
            generation = None
        self.end_ids = end_of_turn_ids(self.tokenizer, generation)
        chat = chat or ChatConfig()
        # The family's training template, as the server samples with it (training.model.chat_templates).
        family = install(self.tokenizer, name=chat.family, reasoning=chat.reasoning)
        if family is not None and (marker := self.tokenizer.convert_tokens_to_ids(family.end_of_turn)) is not None \
                and marker not in self.end_ids:
            self.end_ids.append(int(marker))
        self.pad_id = pad_token_id(self.tokenizer)
        base = self._load_base(base_model)
        peft_config = PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                     target_modules=lora.target_modules, task_type="CAUSAL_LM")
        self.model = get_peft_model(base, peft_config)  # adapter weights stay float32 (peft's default)
        self.max_length = getattr(base.config, "max_position_embeddings", 2048)
        self.temperature = temperature
        self.policy = distributed.wrap(
            _PolicyLogprobs(self.model, temperature, self.options.logprob_chunk_tokens), self.options.distributed)
        params = self.trained_params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=learning_rate, betas=adam_betas,
                                           weight_decay=weight_decay, fused=_fused_ok(params))
        self.model.train()  # stays in training mode; measuring passes switch to eval and back
        self._saved_params: dict[str, torch.nn.Parameter] | None = None  # for save_adapter, found once
        if distributed.is_sharded(self.policy):
            self._gather_adapter()

    def _load_base(self, base_model: str) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        kwargs: dict[str, Any] = {"dtype": self.dtype, "attn_implementation": self.options.attn_implementation}
        if self.options.load_in_4bit:
            if importlib.util.find_spec("bitsandbytes") is None:
                raise TrainingError("trainer.load_in_4bit needs the bitsandbytes package: pip install bitsandbytes")
            if not self.device.startswith("cuda"):
                raise TrainingError("trainer.load_in_4bit needs a CUDA device")
            from peft import prepare_model_for_kbit_training
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=self.dtype if self.dtype != torch.float32 else torch.bfloat16)
            kwargs["device_map"] = {"": self.device}
            base = AutoModelForCausalLM.from_pretrained(base_model, **kwargs)
            base = prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
        else:
            try:
                base = AutoModelForCausalLM.from_pretrained(base_model, **kwargs).to(self.device)
            except torch.OutOfMemoryError as err:
                raise TrainingError(f"the base model does not fit on {self.device}: {err}") from None
        if self.options.gradient_checkpointing is True:  # 'auto' unresolved (no plan, e.g. SFT): off
            # Non-reentrant: works with a frozen embedding (LoRA) and under DDP.
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return base

    def step_bytes(self) -> int:
        """What one micro-batch needs beyond the resident weights and adapter: the loop checks it against the
        GPU's free memory once the inference server holds its share (training/model/gpu/sharing.py)."""
        return step_memory_bytes(self.model.get_base_model().config, tokens=self.micro_batch_tokens,
                                 dtype=self.dtype, checkpointing=self.options.gradient_checkpointing is True,
                                 chunk_tokens=self.options.logprob_chunk_tokens, lora=self.lora)

    def _tensors(self, batch: list[Row]) -> tuple[torch.Tensor, ...]:
        input_ids, mask, attention = pad_batch([(r.input_ids, r.mask) for r in batch], self.pad_id)
        sampler = torch.full(mask.shape, math.nan)
        for i, r in enumerate(batch):
            sampler[i, : len(r.sampler_logprobs)] = torch.tensor(r.sampler_logprobs, dtype=torch.float32)
        return tuple(x.to(self.device) for x in (input_ids, mask, attention, sampler))

    def _logprobs(self, batch: list[Row], *, reference: bool = False) -> torch.Tensor:
        input_ids, mask, attention, _ = self._tensors(batch)
        with torch.no_grad():
            return self.policy(input_ids, attention, mask, reference)

    def save(self, directory: Path, state: dict[str, Any]) -> None:
        """Adapter (loadable by vLLM and peft), optimizer state and step metadata."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")
        (directory / "state.json").write_text(json.dumps(state, indent=2))

    def _trained_by_saved_name(self) -> dict[str, torch.nn.Parameter]:
        """The adapter's weights under the names peft saves them (without the adapter's name)."""
        return {k.replace(".default", ""): p for k, p in self.model.named_parameters() if p.requires_grad}

    def _gather_adapter(self) -> None:
        """Under FSDP, after each step on every rank: the adapter whole, for rank 0 to save (a collective)."""
        self._whole_adapter = {k: distributed.whole(p.detach()).to("cpu")
                               for k, p in self._trained_by_saved_name().items()}

    def save_adapter(self, directory: Path) -> None:
        """The adapter alone, as `save` writes it (config and safetensors) but without peft's model card."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.model.peft_config["default"].save_pretrained(directory)
        if distributed.is_sharded(self.policy):
            weights = self._whole_adapter
        else:
            if self._saved_params is None:
                # peft's state-dict walk visits every base weight (~9 ms on the tiny model): the adapter's
                # parameters under their saved names are found once, and checked against peft's own answer.
                params = self._trained_by_saved_name()
                self._saved_params = params if params.keys() == get_peft_model_state_dict(self.model).keys() else {}
            weights = self._saved_params or get_peft_model_state_dict(self.model)
        save_file({k: v.detach().to("cpu").contiguous() for k, v in weights.items()},
                  directory / "adapter_model.safetensors", metadata={"format": "pt"})

    def optimizer_snapshot(self) -> dict[str, Any]:
        """A copy of the optimizer state that training can run past while it is written. Under FSDP every rank
        calls it (it gathers the state; rank 0 gets it whole, keyed by parameter name)."""
        import copy

        if distributed.is_sharded(self.policy):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            return get_optimizer_state_dict(self.policy, self.optimizer,
                                            options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return copy.deepcopy(self.optimizer.state_dict())

    def load(self, directory: Path, *, optimizer: bool = True) -> None:
        """Restores the adapter (and, to resume rather than fork, the optimizer state). Every rank calls it."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(directory / "adapter_model.safetensors")
        expected = self._trained_by_saved_name().keys()
        missing, unexpected = sorted(expected - weights.keys()), sorted(weights.keys() - expected)
        if missing or unexpected:  # strict: a tensor dropped or ignored would train another adapter than named
            raise TrainingError(f"the adapter in {directory} does not match this run's LoRA adapter: "
                                f"{len(missing)} missing tensor(s) {missing[:3]}, {len(unexpected)} unexpected "
                                f"tensor(s) {unexpected[:3]}")
        state = torch.load(directory / "optimizer.pt", weights_only=True) if optimizer else None
        if distributed.is_sharded(self.policy):
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions, set_model_state_dict, set_optimizer_state_dict,
            )

            whole = StateDictOptions(full_state_dict=True, strict=False)
            names = {k.replace(".default", ""): k for k, p in self.model.named_parameters() if p.requires_grad}
            # The policy module holds the peft model as `model`.
            set_model_state_dict(self.policy, {f"model.{names[k]}": v for k, v in weights.items()}, options=whole)
            if state is not None:
                set_optimizer_state_dict(self.policy, self.optimizer, state, options=whole)
            self._gather_adapter()
            return
        set_peft_model_state_dict(self.model, weights)
        if state is not None:
            self.optimizer.load_state_dict(state)
