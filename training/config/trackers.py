"""The trackers' section of a run config (training/monitoring/trackers.py and training/monitoring/langfuse.py report
to them)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LangfuseSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1, pattern=r"^https?://", description="The Langfuse server (its base URL).")
    environment: str | None = Field(None, pattern=r"^[a-z0-9_-]{1,40}$",
                                    description="Langfuse's environment name for these traces (None: its default).")
    flush_interval_s: float = Field(2.0, gt=0.0, description="How often spans and scores are sent in the background.")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WandbSettings(_Strict):
    project: str = Field(min_length=1, max_length=128, description="The W&B project the runs go to.")
    entity: str | None = Field(None, max_length=128, description="The W&B team or user (None: the key's default).")
    mode: Literal["online", "offline"] = Field("online", description="offline: a local run directory, no account "
                                               "(`wandb sync` uploads it later).")
    dir: str | None = Field(None, description="Where W&B writes its run directories (None: its default).")


class MlflowSettings(_Strict):
    tracking_uri: str = Field(min_length=1, description="An MLflow server (http…) or a file store (file:…).")
    experiment: str = Field("rubric-studio", min_length=1, max_length=256)


class TrackersConfig(_Strict):
    wandb: WandbSettings | None = Field(None, description="Report to Weights & Biases.")
    mlflow: MlflowSettings | None = Field(None, description="Report to MLflow.")
    langfuse: LangfuseSettings | None = Field(None, description="Each trajectory a Langfuse trace "
                                              "(training/monitoring/langfuse.py).")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                               description="A stable id for the tracker's run (W&B resumes it when the run resumes).")
    run_url: str | None = Field(None, max_length=2000, description="A link back to the run's page.")
    flush_timeout_s: float = Field(60.0, ge=0.0, description="How long the run's end waits for the trackers.")

    @property
    def enabled(self) -> bool:
        return self.wandb is not None or self.mlflow is not None or self.langfuse is not None
