"""The GRPO trainer: a peft LoRA adapter on the base model, updated from scored trajectory groups.

Memory is bounded by `grpo.micro_batch_size`, not by the group size: sequences are processed in micro-batches
whose gradients accumulate, each weighted by its share of the batch's trained tokens, so the loss is the mean
over all trained tokens of the step. The KL reference is the same model with its adapter disabled.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from training.chat_format import encode_conversation
from training.config import GRPOConfig, LoraConfig
from training.grpo import policy_loss, token_logprobs
from training.sft import pad_batch
from training.types import TrajectoryGroup


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class Trainer:
    def __init__(self, base_model: str, lora: LoraConfig, grpo: GRPOConfig, *, device: str = "cpu",
                 seed: int = 0) -> None:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        self.grpo = grpo
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(base_model)
        base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32).to(device)
        peft_config = PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                     target_modules=lora.target_modules, task_type="CAUSAL_LM")
        self.model = get_peft_model(base, peft_config)
        self.max_length = getattr(base.config, "max_position_embeddings", 2048)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=grpo.learning_rate, betas=grpo.adam_betas,
                                           weight_decay=grpo.weight_decay)

    def _sequences(self, groups: list[TrajectoryGroup]) -> list[tuple[list[int], list[int], float]]:
        rows = []
        for group in groups:
            if group.skipped:
                continue
            for t in group.trajectories:
                if t.error or not t.advantage:
                    continue  # a zero advantage contributes no gradient: skip the compute
                ids, mask = encode_conversation(self.tokenizer, t.messages, t.tools, t.turn_token_ids)
                if sum(mask) == 0:
                    continue
                rows.append((ids[: self.max_length], mask[: self.max_length], float(t.advantage)))
        return rows

    def _tensors(self, batch: list[tuple[list[int], list[int], float]]):
        input_ids, mask, attention = pad_batch([(ids, m) for ids, m, _ in batch], self.tokenizer.pad_token_id)
        return input_ids.to(self.device), mask.to(self.device), attention.to(self.device)

    def _policy_logprobs(self, batch: list[tuple[list[int], list[int], float]]) -> torch.Tensor:
        input_ids, _, attention = self._tensors(batch)
        return token_logprobs(self.model, input_ids, attention)

    def _reference_logprobs(self, batch: list[tuple[list[int], list[int], float]]) -> torch.Tensor:
        input_ids, _, attention = self._tensors(batch)
        with torch.no_grad(), self.model.disable_adapter():
            return token_logprobs(self.model, input_ids, attention)

    def train_step(self, groups: list[TrajectoryGroup]) -> dict[str, float | None]:
        """One optimizer update (per epoch) over the step's trainable trajectories; returns metrics."""
        rows = self._sequences(groups)
        if not rows:  # every group skipped: nothing to learn from, and the metrics say so
            return {"loss": None, "clip_fraction": None, "ratio_mean": None, "kl": None, "grad_norm": None,
                    "trained_sequences": 0, "tokens": 0}
        size = self.grpo.micro_batch_size
        micro = [rows[i: i + size] for i in range(0, len(rows), size)]
        total_tokens = float(sum(sum(m) for _, m, _ in rows))
        self.model.eval()  # no dropout while measuring the policy that sampled
        with torch.no_grad():
            olds = [self._policy_logprobs(mb) for mb in micro]
        refs = [self._reference_logprobs(mb) for mb in micro] if self.grpo.beta > 0 else [None] * len(micro)
        self.model.train()
        totals = {"loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "kl": 0.0}
        grad_norm = 0.0
        for _ in range(self.grpo.epochs_per_step):
            self.optimizer.zero_grad()
            for mb, old, ref in zip(micro, olds, refs):
                input_ids, mask, attention = self._tensors(mb)
                advantages = torch.tensor([a for _, _, a in mb], device=self.device)  # [B]
                lp = token_logprobs(self.model, input_ids, attention)
                loss, metrics = policy_loss(lp, old, advantages, mask, eps_low=self.grpo.eps_low,
                                            eps_high=self.grpo.eps_high, ref_logprobs=ref, beta=self.grpo.beta)
                share = float(mask.sum()) / total_tokens
                (loss * share).backward()
                totals["loss"] += loss.item() * share / self.grpo.epochs_per_step
                for k in ("clip_fraction", "ratio_mean", "kl"):
                    totals[k] += metrics[k] * share / self.grpo.epochs_per_step
            params = [p for p in self.model.parameters() if p.requires_grad]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.grpo.max_grad_norm))
            self.optimizer.step()
        self.model.eval()
        return {**totals, "grad_norm": grad_norm, "trained_sequences": len(rows), "tokens": int(total_tokens)}

    def save(self, directory: Path, state: dict[str, Any]) -> None:
        """Adapter (loadable by vLLM and peft), optimizer state and step metadata."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")
        (directory / "state.json").write_text(json.dumps(state, indent=2))

    def save_adapter(self, directory: Path) -> None:
        """The adapter alone, as `save` writes it (config and safetensors) but without peft's model card."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.model.peft_config["default"].save_pretrained(directory)
        if getattr(self, "_adapter_params", None) is None:
            # peft's state-dict walk visits every base weight (~9 ms on the tiny model): find the adapter's
            # parameters under their saved names once, and check them against peft's own answer.
            params = {k.replace(".default", ""): p for k, p in self.model.named_parameters() if p.requires_grad}
            expected = get_peft_model_state_dict(self.model)
            self._adapter_params = params if params.keys() == expected.keys() else None
            if self._adapter_params is None:
                weights = expected
        if self._adapter_params is not None:
            weights = self._adapter_params
        save_file({k: v.detach().to("cpu").contiguous() for k, v in weights.items()},
                  directory / "adapter_model.safetensors", metadata={"format": "pt"})

    def optimizer_snapshot(self) -> dict[str, Any]:
        """A copy of the optimizer state that training can run past while it is written."""
        import copy

        return copy.deepcopy(self.optimizer.state_dict())

    def load(self, directory: Path, *, optimizer: bool = True) -> None:
        """Restores the adapter (and, to resume rather than fork, the optimizer state)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(self.model, load_file(directory / "adapter_model.safetensors"))
        if optimizer:
            self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))
