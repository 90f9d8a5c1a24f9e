"""Micro-batches by a token budget: memory is bounded by padded tokens per forward pass, not by a sequence count.

Rows are sorted by length (length bucketing) and packed greedily while (rows × longest row) stays within the
budget, so short sequences share a pass and padding stays small. The loss stays exactly token-weighted: each
micro-batch's mean loss is weighted by its share of the step's trained tokens, whatever the packing.
"""
from __future__ import annotations

from dataclasses import dataclass

from training.types import TrainingError


@dataclass
class Row:
    input_ids: list[int]
    mask: list[int]  # 1 on trained (assistant) tokens
    advantage: float
    sampler_logprobs: list[float]  # NaN where the server reported none

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


def micro_batches(rows: list[Row], *, max_tokens: int, max_rows: int) -> list[list[Row]]:
    """Rows grouped into micro-batches of at most `max_rows` rows and `max_tokens` padded tokens each."""
    longest = max((len(r.input_ids) for r in rows), default=0)
    if longest > max_tokens:
        raise TrainingError(f"a trajectory of {longest} tokens does not fit grpo.micro_batch_tokens={max_tokens}: "
                            "raise the budget (more memory) or shorten trajectories (sampling.max_tokens, turns)")
    batches: list[list[Row]] = []
    current: list[Row] = []
    for row in sorted(rows, key=lambda r: len(r.input_ids)):
        width = len(row.input_ids)  # rows come sorted, so the newest row is the longest of the batch
        if current and (len(current) + 1 > max_rows or (len(current) + 1) * width > max_tokens):
            batches.append(current)
            current = []
        current.append(row)
    if current:
        batches.append(current)
    return batches


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
