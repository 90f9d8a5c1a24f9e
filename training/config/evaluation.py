"""Held-out evaluation's section of a run config (training/monitoring/evaluation.py runs it)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvaluationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    held_out_fraction: float = Field(
        0.0, ge=0.0, lt=1.0, description="Fraction of the scenarios kept out of training and used for evaluation "
        "(a seeded split by id). 0 with no held_out_ids: no evaluation.")
    held_out_ids: list[str] = Field(
        default_factory=list, description="Scenario ids held out explicitly (added to the fraction's).")
    every: int = Field(10, ge=1, description="Evaluate after every N-th step (and after the last one).")
    samples: int = Field(2, ge=1, le=64, description="Answers per model per held-out scenario.")
    temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="Sampling temperature for evaluation; None uses the run's.")

    @property
    def enabled(self) -> bool:
        return self.held_out_fraction > 0 or bool(self.held_out_ids)
