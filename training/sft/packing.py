"""SFT batches by a token budget, with packing: what each optimizer step trains on.

An epoch walks a seeded shuffle of the encoded conversations and cuts it into steps of at most `batch_tokens`
tokens. Within a step the conversations are packed (first fit, longest first) into rows of at most
`micro_batch_tokens` tokens: one row is one forward pass, with no padding. A row's position ids restart at 0
for each conversation it holds; the model then attends within each conversation only (transformers builds a
block-diagonal causal mask from restarting position ids when no attention mask is given), so a packed row
computes exactly what the conversations would alone (tests/training/test_sft_packing.py checks it).

Pure Python: the plan is deterministic from the seed, so a resumed run trains step k on what step k was.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from training.types import TrainingError


@dataclass
class Encoded:
    """One conversation as token ids with its loss mask (1 on the assistant's own tokens)."""

    input_ids: list[int]
    mask: list[int]
    source: int  # its index in the dataset (the JSONL line order)

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


@dataclass
class Packed:
    """One forward pass: conversations laid end to end, positions restarting at each."""

    input_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)

    def add(self, row: Encoded) -> None:
        self.input_ids += row.input_ids
        # A row's first token has no prediction, and in a packed row its "previous" token is the end of the
        # conversation before it: never trained.
        self.mask += [0] + row.mask[1:]
        self.position_ids += list(range(len(row.input_ids)))
        self.sources.append(row.source)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


def check_lengths(rows: list[Encoded], *, micro_batch_tokens: int, describe=str, context: int | None = None) -> None:
    """Refuses conversations longer than the model's `context` (no setting can train them) or than a forward
    pass, naming them (`describe(source)`)."""
    if context is not None and (beyond := [r for r in rows if len(r.input_ids) > context]):
        named = ", ".join(f"{describe(r.source)} ({len(r.input_ids)} tokens)" for r in beyond[:5])
        raise TrainingError(f"{len(beyond)} conversation(s) are longer than the model's context of {context} "
                            f"tokens: {named}; no setting can train them: shorten them or remove them from the "
                            "data")
    long = [r for r in rows if len(r.input_ids) > micro_batch_tokens]
    if long:
        named = ", ".join(f"{describe(r.source)} ({len(r.input_ids)} tokens)" for r in long[:5])
        raise TrainingError(f"{len(long)} conversation(s) are longer than sft.micro_batch_tokens "
                            f"({micro_batch_tokens}): {named}; raise sft.micro_batch_tokens (more memory) or "
                            "shorten them")


def pack(rows: list[Encoded], *, micro_batch_tokens: int) -> list[Packed]:
    """First-fit decreasing: each conversation goes into the first row with room, longest first."""
    packs: list[Packed] = []
    for row in sorted(rows, key=lambda r: -len(r.input_ids)):
        target = next((p for p in packs if len(p) + len(row.input_ids) <= micro_batch_tokens), None)
        if target is None:
            target = Packed()
            packs.append(target)
        target.add(row)
    return packs


def epoch_steps(rows: list[Encoded], *, batch_tokens: int, seed: int, epoch: int) -> list[list[Encoded]]:
    """One epoch as steps: the seeded shuffle cut where the next conversation would pass `batch_tokens`.
    Every conversation is in exactly one step of the epoch."""
    order = list(range(len(rows)))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    steps: list[list[Encoded]] = []
    current: list[Encoded] = []
    size = 0
    for i in order:
        row = rows[i]
        if current and size + len(row.input_ids) > batch_tokens:
            steps.append(current)
            current, size = [], 0
        current.append(row)
        size += len(row.input_ids)
    if current:
        steps.append(current)
    return steps


@dataclass
class Plan:
    """Every step of the run, in order: (epoch, the step's conversations)."""

    steps: list[tuple[int, list[Encoded]]]

    @property
    def total(self) -> int:
        return len(self.steps)


def plan_run(rows: list[Encoded], *, epochs: int, batch_tokens: int, seed: int, max_steps: int | None) -> Plan:
    if not rows:
        raise TrainingError("no conversation to train on (the held-out split took them all?)")
    steps = [(epoch, step) for epoch in range(1, epochs + 1)
             for step in epoch_steps(rows, batch_tokens=batch_tokens, seed=seed, epoch=epoch)]
    return Plan(steps[:max_steps] if max_steps else steps)
