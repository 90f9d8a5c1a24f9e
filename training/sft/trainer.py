"""The SFT step: cross-entropy on the assistant's tokens of packed conversations, on the shared adapter trainer.

`SFTTrainer` is the adapter trainer of training/model/adapter.py (the same peft LoRA adapter on the same base
model, the same optimizer, checkpoint files, resume and fork as GRPO's) with a supervised step. Each step's loss
is the mean over every trained token of the step: each packed row's summed loss is divided by the step's
trained tokens, and the rows' gradients accumulate, so how the conversations were packed never changes it.
Log-probs come from the model package's `token_logprobs` (logits only at trained positions, in chunks), as
GRPO's do, so the two run kinds compute one thing one way.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from training.config import ChatConfig, LoraConfig, TrainerConfig
from training.config.sft import SFTOptions
from training.model.adapter import AdapterTrainer
from training.model.chat_format import encode_conversation
from training.model.logprobs import token_logprobs
from training.sft.packing import Encoded, Packed, pack
from training.types import TrainingError


class SFTTrainer(AdapterTrainer):
    def __init__(self, base_model: str, lora: LoraConfig, sft: SFTOptions, *, device: str = "cpu", seed: int = 0,
                 options: TrainerConfig | None = None, chat: ChatConfig | None = None) -> None:
        if options is not None and options.distributed != "none":
            raise TrainingError("SFT runs train in one process: set trainer.distributed to 'none'")
        super().__init__(base_model, lora, learning_rate=sft.learning_rate, adam_betas=sft.adam_betas,
                         weight_decay=sft.weight_decay, micro_batch_tokens=sft.micro_batch_tokens, device=device,
                         seed=seed, options=options, temperature=1.0, chat=chat)
        self.sft = sft

    def encode(self, conversation: Any, source: int) -> Encoded:
        """A dataset conversation as ids and its assistant-only mask, rendered as GRPO renders trajectories."""
        ids, mask = encode_conversation(self.tokenizer, conversation.as_messages(), conversation.tool_list(),
                                        end_ids=self.end_ids)
        return Encoded(ids, mask, source)

    def _tensors_of(self, row: Packed) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        def tensor(values: list[int], dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.tensor([values], dtype=dtype, device=self.device)  # [1, T]

        return tensor(row.input_ids), tensor(row.mask, torch.float32), tensor(row.position_ids)

    def _row_loss_sum(self, row: Packed) -> torch.Tensor:
        input_ids, mask, positions = self._tensors_of(row)
        lp = token_logprobs(self.model, input_ids, None, mask, chunk_tokens=self.options.logprob_chunk_tokens,
                            position_ids=positions)  # [1, T], 0 off the trained positions
        return -(lp * mask).sum()

    def sft_step(self, rows: list[Encoded], learning_rate: float) -> dict[str, float | int | None]:
        """One optimizer update on a step's conversations; returns its metrics."""
        packs = pack(rows, micro_batch_tokens=self.sft.micro_batch_tokens)
        trained = float(sum(p.trained_tokens for p in packs))
        tokens = sum(len(p) for p in packs)
        if not trained:
            return {"loss": None, "grad_norm": None, "learning_rate": learning_rate, "tokens": tokens,
                    "trained_tokens": 0, "conversations": len(rows), "packed_rows": len(packs)}
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.optimizer.zero_grad()
        total = 0.0
        for row in packs:
            loss = self._row_loss_sum(row) / trained
            loss.backward()
            total += loss.item()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trained_params, self.sft.max_grad_norm, foreach=True))
        self.optimizer.step()
        return {"loss": total, "grad_norm": grad_norm if math.isfinite(grad_norm) else None,
                "learning_rate": learning_rate, "tokens": tokens, "trained_tokens": int(trained),
                "conversations": len(rows), "packed_rows": len(packs)}

    def held_out_loss(self, rows: list[Encoded]) -> tuple[float | None, int]:
        """(mean loss over the held-out conversations' trained tokens, those tokens), without dropout."""
        packs = pack(rows, micro_batch_tokens=self.sft.micro_batch_tokens)
        trained = sum(p.trained_tokens for p in packs)
        if not trained:
            return None, 0
        self.model.eval()
        try:
            with torch.no_grad():
                total = sum(float(self._row_loss_sum(row)) for row in packs)
        finally:
            self.model.train()
        return total / trained, trained
