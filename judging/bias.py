"""Judge check: how much does the judge's verdict depend on where an answer is shown, and on its length?

On a fixed set of groups:
- **rank flips** (position bias): each group is scored as stored and reversed, one pass each; a pair of
  distinct answers flips when the two scorings order it differently (a tie on one side only counts half);
- **multi-pass**: the same, with the judge's own multi-pass scoring (k shuffled orders averaged); whether it
  halves the flips is reported;
- **self-consistency**: the group is scored in a few shuffled orders; the mean Kendall tau between those passes;
- **length bias**: the Spearman correlation of score and answer length within each group, averaged.
Each scoring sees one explicit order (the judge's own shuffle is off), so the order is the only thing that
changes. The cache is off: a rescoring must ask the judge again.
"""
from __future__ import annotations

import asyncio
import random
import statistics
from typing import Any, Sequence

from pydantic import BaseModel

from judging.agreement import kendall_tau, spearman
from judging.core import score_group

Message = dict[str, Any]


class GroupCheck(BaseModel):
    pairs: int
    flips_single: float
    flips_multi: float
    consistency: float | None
    length_correlation: float | None


class BiasReport(BaseModel):
    groups: int
    pairs: int
    passes: int
    flips_single: float
    flips_multi: float
    flip_rate_single: float | None
    flip_rate_multi: float | None
    multi_pass_halves_flips: bool | None
    self_consistency: float | None  # mean Kendall tau between shuffled single passes (1 = same order always)
    length_correlation: float | None  # mean within-group Spearman(score, length); > 0: longer scores higher
    per_group: list[GroupCheck]


def pair_flips(a: Sequence[float], b: Sequence[float]) -> tuple[float, int]:
    """(flips, pairs): pairs ordered one way by `a` and the other by `b`; tied in one scoring only = 1/2."""
    flips, pairs = 0.0, 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            sa = (a[i] > a[j]) - (a[i] < a[j])
            sb = (b[i] > b[j]) - (b[i] < b[j])
            pairs += 1
            flips += 1.0 if sa * sb < 0 else 0.5 if sa != sb else 0.0
    return flips, pairs


def answer_length(messages: Sequence[Message]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages if m.get("role") == "assistant")


async def score_in_order(lists: list[list[Message]], order: list[int], model: str, passes: int = 1,
                         **kwargs: Any) -> list[float]:
    """Scores with the answers presented in `order` (one pass), or with the judge's k shuffled passes; returns
    the scores in the original positions."""
    shown = [lists[i] for i in order]
    judgement = await score_group(shown, model, passes=passes, shuffle=passes > 1, cache=False, **kwargs)
    scores = [0.0] * len(lists)
    for position, original in enumerate(order):
        scores[original] = judgement.scores[position].score
    return scores


async def check_group(lists: list[list[Message]], model: str, *, passes: int, shuffles: int, seed: int,
                      **kwargs: Any) -> GroupCheck:
    n = len(lists)
    forward, backward = list(range(n)), list(reversed(range(n)))
    single_f = await score_in_order(lists, forward, model, **kwargs)
    single_b = await score_in_order(lists, backward, model, **kwargs)
    flips_single, pairs = pair_flips(single_f, single_b)
    multi_f = await score_in_order(lists, forward, model, passes=passes, **kwargs)
    multi_b = await score_in_order(lists, backward, model, passes=passes, **kwargs)
    flips_multi, _ = pair_flips(multi_f, multi_b)
    rng = random.Random(seed)
    runs = [single_f, single_b]
    for _ in range(shuffles):
        order = forward[:]
        rng.shuffle(order)
        runs.append(await score_in_order(lists, order, model, **kwargs))
    taus = [t for i in range(len(runs)) for j in range(i + 1, len(runs))
            if (t := kendall_tau(runs[i], runs[j])) is not None]
    lengths = [float(answer_length(ml)) for ml in lists]
    return GroupCheck(pairs=pairs, flips_single=flips_single, flips_multi=flips_multi,
                      consistency=statistics.fmean(taus) if taus else None,
                      length_correlation=spearman(single_f, lengths))


async def judge_check(groups: Sequence[Sequence[Sequence[Message]]], model: str, *, passes: int = 3,
                      shuffles: int = 2, seed: int = 0, **kwargs: Any) -> BiasReport:
    """Runs the check on each group (each a list of ≥ 2 trajectories); `kwargs` go to score_group (rubric,
    extra_litellm_params, tools, criteria, ...)."""
    usable = [[list(ml) for ml in g] for g in groups if len(g) >= 2]
    checks = list(await asyncio.gather(*(check_group(g, model, passes=passes, shuffles=shuffles, seed=seed + i,
                                                     **kwargs) for i, g in enumerate(usable))))
    pairs = sum(c.pairs for c in checks)
    single, multi = sum(c.flips_single for c in checks), sum(c.flips_multi for c in checks)
    consistency = [c.consistency for c in checks if c.consistency is not None]
    lengths = [c.length_correlation for c in checks if c.length_correlation is not None]
    return BiasReport(
        groups=len(checks), pairs=pairs, passes=passes, flips_single=single, flips_multi=multi,
        flip_rate_single=single / pairs if pairs else None, flip_rate_multi=multi / pairs if pairs else None,
        multi_pass_halves_flips=(multi <= single / 2) if single else None,
        self_consistency=statistics.fmean(consistency) if consistency else None,
        length_correlation=statistics.fmean(lengths) if lengths else None, per_group=checks)


def format_report(report: BiasReport) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.0%}"

    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:+.2f}"

    halves = {True: "yes", False: "no", None: "n/a (no flips)"}[report.multi_pass_halves_flips]
    return "\n".join([
        f"judge check on {report.groups} groups ({report.pairs} answer pairs)",
        f"  rank flips, stored vs reversed order, 1 pass:   {report.flips_single:g} ({pct(report.flip_rate_single)})",
        f"  rank flips, stored vs reversed, {report.passes} passes:      {report.flips_multi:g} "
        f"({pct(report.flip_rate_multi)})",
        f"  multi-pass halves the flips: {halves}",
        f"  self-consistency (Kendall tau across orders): {num(report.self_consistency)}",
        f"  length bias (Spearman score vs length in a group): {num(report.length_correlation)}",
    ])
