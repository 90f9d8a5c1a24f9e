"""The `sft` section of a run config: what an SFT run (`kind: "sft"`) trains on and how.

The rest of the run config is shared with GRPO runs: base_model, lora, trainer, server, output_dir, seed,
init_checkpoint (start from another run's adapter), and `scenarios` + `evaluation` + `judge` for the held-out
win rate against the base model. `steps` and `grpo` do not apply: the number of steps follows from the data,
`epochs` and `batch_tokens` (or `max_steps`).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SFTOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_file: str | None = Field(
        None, description="A JSONL file of conversations in the OpenAI chat format (one {\"messages\": [...], "
        "\"tools\": [...]} per line). Command-line runs name it; the web app writes the run's dataset version "
        "there itself and refuses it from a person.")
    conversations: list[dict[str, Any]] | None = Field(
        None, description="The conversations inline, in the same format (instead of data_file).")
    dataset: str | None = Field(None, max_length=300, description="Which dataset version the conversations are "
                                "('name vN'), as the web app recorded it at launch; shown on pages, not read.")
    epochs: int = Field(3, ge=1, le=1000, description="Passes over the training conversations.")
    max_steps: int | None = Field(None, ge=1, le=1_000_000, description="Stop after this many optimizer steps "
                                  "(None: every step of every epoch).")
    batch_tokens: int = Field(4096, ge=16, description="Tokens (prompt and answer, no padding) per optimizer "
                              "step: the batch size, by tokens rather than conversations.")
    micro_batch_tokens: int = Field(2048, ge=16, description="Tokens per forward pass (one packed row): bounds "
                                    "memory. A longer conversation is refused with its line number.")
    learning_rate: float = Field(2e-4, gt=0.0, description="The peak learning rate (after warm-up).")
    warmup_ratio: float = Field(0.05, ge=0.0, le=0.5, description="Share of the steps over which the learning "
                                "rate rises linearly from 0 to the peak.")
    schedule: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="Decay after warm-up, down to min_lr_ratio × the peak at the last step.")
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="The final learning rate as a share of the peak.")
    weight_decay: float = Field(0.0, ge=0.0)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = Field(1.0, gt=0.0)
    held_out_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="Share of the conversations kept out of "
                                     "training; their loss is the held-out loss (a seeded split by content).")
    eval_every: int = Field(10, ge=1, description="Held-out loss after every N-th step (and the last).")
    save_every: int = Field(10, ge=1, description="Save a checkpoint (adapter and optimizer) every N steps, and "
                            "at the last step, a pause or a cancel; a resumed run continues after the newest.")

    @model_validator(mode="after")
    def _one_source(self) -> "SFTOptions":
        if self.data_file and self.conversations is not None:
            raise ValueError("give sft.data_file or sft.conversations, not both")
        if self.micro_batch_tokens > self.batch_tokens:
            raise ValueError(f"sft.micro_batch_tokens ({self.micro_batch_tokens}) is above sft.batch_tokens "
                             f"({self.batch_tokens}): a forward pass cannot hold more than a step")
        return self


def learning_rate_at(step: int, total: int, options: SFTOptions) -> float:
    """The learning rate of 1-based `step` of `total`: linear warm-up to the peak, then the schedule's decay
    to min_lr_ratio × peak at the last step."""
    import math

    peak, floor = options.learning_rate, options.learning_rate * options.min_lr_ratio
    warmup = math.ceil(options.warmup_ratio * total)
    if step <= warmup:
        return peak * step / warmup
    if options.schedule == "constant" or total <= warmup + 1:
        return peak
    progress = (step - warmup - 1) / (total - warmup - 1)  # 0 at the first step after warm-up, 1 at the last
    if options.schedule == "linear":
        return peak - (peak - floor) * progress
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
