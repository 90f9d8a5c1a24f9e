"""The monitors' section of a run config (training/monitoring/monitors.py computes them)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


MonitorName = Literal["length", "repetition", "empty", "judge_divergence", "kl", "zero_variance", "truncation",
                      "entropy"]


class MonitorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window: int = Field(3, ge=1, description="Steps averaged on each side of a trend comparison.")
    max_length_growth: float = Field(
        2.0, gt=1.0, description="Alert when the mean answer length of the last `window` steps exceeds this "
        "multiple of the first `window` steps'.")
    ngram: int = Field(3, ge=1, le=10, description="Word n-gram size of the repeat rate.")
    max_repeat_rate: float = Field(0.5, ge=0.0, le=1.0, description="Alert above this share of repeated n-grams.")
    max_empty_rate: float = Field(0.5, ge=0.0, le=1.0, description="Alert above this share of empty answers.")
    min_divergence: float = Field(
        0.05, gt=0.0, description="Alert when the judge mean rose by at least this over the last `window` steps "
        "while the env reward mean or the held-out win rate fell by at least this.")
    max_kl: float | None = Field(1.0, gt=0.0, description="Alert above this KL to the base (where measured).")
    max_zero_variance: float = Field(
        0.9, ge=0.0, le=1.0, description="Alert above this fraction of groups with no reward spread (no gradient) "
        "for `stall_steps` steps in a row.")
    max_truncated: float = Field(
        0.5, ge=0.0, le=1.0, description="Alert above this share of answers cut off at sampling.max_tokens for "
        "`stall_steps` steps in a row.")
    min_entropy: float | None = Field(
        0.02, ge=0.0, description="Alert below this entropy on the sampled tokens (nats per token) for "
        "`stall_steps` steps in a row: the policy samples one answer, its groups have nothing to compare.")
    stall_steps: int = Field(3, ge=1, description="Steps in a row a stall signal must cross before it alerts: one "
                                                  "flat step is noise, several are a run that has stopped learning.")
    pause_on: list[MonitorName] = Field(
        default_factory=lambda: ["judge_divergence"], description="Monitors whose alert pauses the run.")
