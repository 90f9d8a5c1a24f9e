"""What a deployment allows each judge key variable: its shared concurrency and request rate (pure, no I/O).

The web app reads STUDIO_JUDGE_KEY_LIMITS at start, e.g.
{"OPENAI_API_KEY": {"concurrency": 8, "per_minute": 600}}, and hands each run's engine the budget of its judge's
key in STUDIO_JUDGE_BUDGET (a BudgetSpec as JSON): which limits apply and where the shared counts live.
"""
from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

LIMITS_ENV = "STUDIO_JUDGE_KEY_LIMITS"
BUDGET_ENV = "STUDIO_JUDGE_BUDGET"
# The same shape judge key variables must have (webapp/judge_keys.py); it also makes each name a safe file name.
KEY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*_API_KEY$")


class KeyLimit(BaseModel):
    """One key variable's budget, shared by every run and re-scoring that sends that key."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int | None = Field(None, ge=1, description="Judge requests in flight at once, all runs together.")
    per_minute: float | None = Field(None, gt=0, description="Requests started per minute, all runs together; "
                                     "they start at least 60/per_minute seconds apart.")
    lease_s: float = Field(30.0, gt=0, le=3600, description="How long a slot outlives a holder that stopped "
                           "renewing it (a killed process) in Redis; held slots are renewed every lease_s/3.")

    @model_validator(mode="after")
    def _limits_something(self) -> "KeyLimit":
        if self.concurrency is None and self.per_minute is None:
            raise ValueError("give concurrency, per_minute or both")
        return self


class BudgetSpec(BaseModel):
    """Where the shared counts live and the limits that apply: what the engine is given in BUDGET_ENV."""

    model_config = ConfigDict(extra="forbid")

    store: str = Field(min_length=1, description="redis://, rediss:// or unix:// URL, or a directory for "
                                                 "file locks (one machine).")
    prefix: str = Field("studio", description="Prefix of the Redis keys, so deployments sharing a Redis differ.")
    limits: dict[str, KeyLimit]


def parse_key_limits(text: str) -> dict[str, KeyLimit]:
    """The limits in `text` (LIMITS_ENV's JSON); ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{LIMITS_ENV} is not JSON: {err}") from None
    if not isinstance(raw, dict):
        raise ValueError(f'{LIMITS_ENV} must map key variables to limits, e.g. '
                         '{"OPENAI_API_KEY": {"concurrency": 8, "per_minute": 600}}')
    limits: dict[str, KeyLimit] = {}
    for name, entry in raw.items():
        if not KEY_NAME.match(name):
            raise ValueError(f"{LIMITS_ENV}: {name!r} is not a judge key variable (a name ending in _API_KEY)")
        try:
            limits[name] = KeyLimit.model_validate(entry)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in err.errors())
            raise ValueError(f"{LIMITS_ENV}: {name}: {problems}") from None
    return limits
