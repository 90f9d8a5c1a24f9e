"""Supervised fine-tuning of a whole model on conversations: the loss covers the assistant's tokens only.

Builds the tiny offline models (their short warm-up on synthetic games). SFT runs on a LoRA adapter, with
datasets, packing, schedules, checkpoints and events, are the `sft` run kind: training/sft/loop.py.
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any

from training.model.chat_format import encode_conversation, pad_token_id

from training.model.batching import pad_batch


@dataclass
class SFTConfig:
    steps: int = 200
    batch_size: int = 16
    learning_rate: float = 3e-3
    max_length: int = 512
    seed: int = 0
    log_every: int = 0  # 0 = silent
    tools_share: float = 1.0  # with `tools`: the share of each batch whose prompt declares them (the rest: none)


def sft_train(model: Any, tokenizer: Any, conversations: list[list[dict]], config: SFTConfig,
              tools: list[dict] | None = None, optimizer: Any = None) -> list[float]:
    """Trains `model` in place; returns the loss per step. `tools` (OpenAI format) are declared in the prompt of
    `config.tools_share` of each batch's conversations, as an agent with tools sees them. `optimizer` carries
    its state over from an earlier call (its learning rate becomes `config.learning_rate`); None: a fresh AdamW."""
    import torch

    rows: dict[tuple[int, bool], tuple[list[int], list[int]]] = {}

    def row(i: int, declared: bool) -> tuple[list[int], list[int]]:
        """Conversation i, encoded when a batch first draws it: a warm-up draws a few thousand of a large set."""
        if (i, declared) not in rows:
            ids, mask = encode_conversation(tokenizer, conversations[i], tools if declared else None)
            rows[i, declared] = ids[: config.max_length], mask[: config.max_length]
        return rows[i, declared]

    n_tools = round(config.tools_share * config.batch_size) if tools and config.tools_share > 0 else 0
    rng = random.Random(config.seed)
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    for group in optimizer.param_groups:
        group["lr"] = config.learning_rate
    model.train()
    losses: list[float] = []
    for step in range(config.steps):
        picks = rng.sample(range(len(conversations)), min(config.batch_size, len(conversations)))
        # The prompts with and without the tools differ in length by the tool list: padded apart, not together.
        parts = [[row(i, True) for i in picks[:n_tools]], [row(i, False) for i in picks[n_tools:]]]
        total, tokens = 0.0, 0.0
        for batch in filter(None, parts):
            input_ids, loss_mask, attention = pad_batch(batch, pad_token_id(tokenizer))
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]  # [B, T-1, V]
            targets, mask = input_ids[:, 1:], loss_mask[:, 1:]
            token_loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="none"
            ).view_as(mask)
            total, tokens = total + (token_loss * mask).sum(), tokens + mask.sum()
        loss = total / max(float(tokens), 1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if config.log_every and (step + 1) % config.log_every == 0:
            print(f"sft step {step + 1}/{config.steps} loss {loss.item():.3f}", file=sys.stderr)
    model.eval()
    return losses
