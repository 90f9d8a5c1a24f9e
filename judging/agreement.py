"""How far two score sets over the same groups agree (judge vs human overrides, rubric A vs rubric B).

Scores are relative within a group, so every measure is computed per group and then summarised; pooling
scores across groups would compare numbers that were never meant to be compared.

Ties and degenerate groups, decided explicitly:
- pairwise agreement: over all pairs (i, j) in a group, the fraction ordered the same way by both sets, a
  tie counting as an order of its own (tied in both = agree; tied in one only = disagree). Undefined (None)
  for groups with fewer than two scored items. Overall: agreeing pairs / all pairs, pooled over groups.
- Spearman: Pearson correlation of average ranks (ties share the mean of their ranks).
- Kendall: τ-b, which corrects for ties. Both are None for a group with fewer than two items or where either
  set gives every item the same score (a constant has no ranking to correlate). Overall: the mean over
  the groups where they are defined, with that count reported.
- None in either set means "no score for this item" (e.g. no human override): the item is left out.
"""
from __future__ import annotations

import math
from typing import Sequence

from pydantic import BaseModel, ConfigDict

from judging.errors import JudgeError


class GroupAgreement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int
    pairs: int
    agreeing_pairs: int
    pairwise: float | None
    spearman: float | None
    kendall_tau: float | None


class AgreementReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: list[GroupAgreement]
    pairwise: float | None
    spearman: float | None
    kendall_tau: float | None
    groups_with_spearman: int
    groups_with_kendall: int


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks; tied values get the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / math.sqrt(sxx * syy)


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 2:
        return None
    return _pearson(average_ranks(a), average_ranks(b))


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """τ-b = (concordant − discordant) / sqrt((n0 − ties_a)(n0 − ties_b))."""
    n = len(a)
    concordant = discordant = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            sa, sb = _sign(a[i] - a[j]), _sign(b[i] - b[j])
            if sa == 0:
                ties_a += 1
            if sb == 0:
                ties_b += 1
            if sa and sb:
                if sa == sb:
                    concordant += 1
                else:
                    discordant += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - ties_a) * (n0 - ties_b))
    return None if denom == 0 else (concordant - discordant) / denom


def pairwise_counts(a: Sequence[float], b: Sequence[float]) -> tuple[int, int]:
    """(agreeing pairs, all pairs)."""
    agree = total = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            total += 1
            agree += _sign(a[i] - a[j]) == _sign(b[i] - b[j])
    return agree, total


def compare_group(a: Sequence[float | None], b: Sequence[float | None]) -> GroupAgreement:
    if len(a) != len(b):
        raise JudgeError(f"cannot compare score sets of different sizes ({len(a)} vs {len(b)}) in one group")
    kept = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    xs, ys = [float(x) for x, _ in kept], [float(y) for _, y in kept]
    agree, total = pairwise_counts(xs, ys)
    return GroupAgreement(n=len(kept), pairs=total, agreeing_pairs=agree,
                          pairwise=agree / total if total else None,
                          spearman=spearman(xs, ys), kendall_tau=kendall_tau(xs, ys))


def compare(a: Sequence[Sequence[float | None]], b: Sequence[Sequence[float | None]]) -> AgreementReport:
    """Agreement between two score sets given as one list of scores per group, groups in the same order."""
    if len(a) != len(b):
        raise JudgeError(f"cannot compare: {len(a)} groups vs {len(b)} groups")
    groups = [compare_group(x, y) for x, y in zip(a, b)]
    pairs = sum(g.pairs for g in groups)
    rhos = [g.spearman for g in groups if g.spearman is not None]
    taus = [g.kendall_tau for g in groups if g.kendall_tau is not None]
    return AgreementReport(
        groups=groups,
        pairwise=sum(g.agreeing_pairs for g in groups) / pairs if pairs else None,
        spearman=sum(rhos) / len(rhos) if rhos else None,
        kendall_tau=sum(taus) / len(taus) if taus else None,
        groups_with_spearman=len(rhos), groups_with_kendall=len(taus))
