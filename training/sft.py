"""Supervised fine-tuning on conversations: the loss covers the assistant's tokens only.

Used to warm up the tiny demo model, and reusable before RL (SFT warm-up is a feature): give it a model, its
tokenizer and OpenAI-style conversations.
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any

from training.chat_format import encode_conversation, pad_token_id


@dataclass
class SFTConfig:
    steps: int = 200
    batch_size: int = 16
    learning_rate: float = 3e-3
    max_length: int = 512
    seed: int = 0
    log_every: int = 0  # 0 = silent


def pad_batch(rows: list[tuple[list[int], list[int]]], pad_id: int | None):
    """Right-pads (ids, mask) rows into tensors: input_ids [B, T], loss mask [B, T], attention mask [B, T].

    Padding is masked out of attention and loss, so any id serves; None (a tokenizer without a pad token) pads with 0.
    """
    import torch

    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), 0 if pad_id is None else pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.float32)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        loss_mask[i, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        attention[i, : len(ids)] = 1
    return input_ids, loss_mask, attention


def sft_train(model: Any, tokenizer: Any, conversations: list[list[dict]], config: SFTConfig,
              tools: list[dict] | None = None) -> list[float]:
    """Trains `model` in place; returns the loss per step. `tools` (OpenAI format) are declared in every
    conversation's prompt, as an agent with tools sees them."""
    import torch

    rows = [encode_conversation(tokenizer, c, tools) for c in conversations]
    rows = [(ids[: config.max_length], mask[: config.max_length]) for ids, mask in rows]
    rng = random.Random(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    model.train()
    losses: list[float] = []
    for step in range(config.steps):
        batch = rng.sample(rows, min(config.batch_size, len(rows)))
        input_ids, loss_mask, attention = pad_batch(batch, pad_token_id(tokenizer))
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]  # [B, T-1, V]
        targets, mask = input_ids[:, 1:], loss_mask[:, 1:]
        token_loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="none"
        ).view_as(mask)
        loss = (token_loss * mask).sum() / mask.sum().clamp(min=1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if config.log_every and (step + 1) % config.log_every == 0:
            print(f"sft step {step + 1}/{config.steps} loss {loss.item():.3f}", file=sys.stderr)
    model.eval()
    return losses
