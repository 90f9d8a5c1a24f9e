"""Per-step health signals, each a pure function of the step's groups (None where nothing measures it).

- `sampled_entropy`: the policy's entropy on the tokens it sampled, estimated as the mean negative log-prob the
  server reported for each sampled token (nats per token). Sampling at temperature 1 this is an unbiased estimate
  of the per-token entropy; at other temperatures it is the sampled tokens' surprise under the model as served.
  It falls towards 0 as the policy stops exploring: every answer of a group the same, nothing to compare.
- `truncated_share`: the share of answers (assistant turns) the server cut off at `max_tokens`
  (finish reason "length"); a cut answer rarely scores, so a high share flattens every group.
- `reward_quartiles`: the step's reward distribution beside its min, mean and max.
- `zero_variance_share`: the share of groups whose rewards were all equal (no gradient).
"""
from __future__ import annotations

import math
import statistics

from training.types import TrajectoryGroup


def sampled_entropy(groups: list[TrajectoryGroup]) -> float | None:
    surprise = [-lp for g in groups for t in g.trajectories if t.error is None for turn in t.turn_logprobs
                if turn for lp in turn if lp is not None and math.isfinite(lp)]
    return statistics.fmean(surprise) if surprise else None


def truncated_share(groups: list[TrajectoryGroup]) -> float | None:
    reasons = [r for g in groups for t in g.trajectories if t.error is None for r in t.finish_reasons if r]
    return sum(r == "length" for r in reasons) / len(reasons) if reasons else None


def reward_quartiles(rewards: list[float]) -> dict[str, float]:
    """{reward_q1, reward_median, reward_q3} (inclusive quartiles: of [0, 1] they are 0.25, 0.5, 0.75)."""
    if not rewards:
        return {}
    if len(rewards) == 1:
        return {"reward_q1": rewards[0], "reward_median": rewards[0], "reward_q3": rewards[0]}
    q1, median, q3 = statistics.quantiles(rewards, n=4, method="inclusive")
    return {"reward_q1": q1, "reward_median": median, "reward_q3": q3}


def zero_variance_share(groups: list[TrajectoryGroup]) -> float | None:
    return sum(g.skipped for g in groups) / len(groups) if groups else None
