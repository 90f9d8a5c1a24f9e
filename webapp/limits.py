"""Per-project limits (DESIGN §8 invariant 8): what one project may store, set by the deployment.

The setting STUDIO_PROJECT_LIMITS is a JSON object whose keys are the fields of `ProjectLimits` (any left out
keep their defaults), read once at start by settings.py; an unknown key or a bad value stops the start. Over a
limit, a write raises `LimitExceeded`, which names the limit, its value and the project's usage: the API answers
it 413 (a limit on bytes) or 409 (a limit on counts) and the pages show it as a form error. It is a
ValidationError, so a page that shows a service's refusals shows this one too. Usage is measured by
webapp/selectors/usage.py; the checks here run inside the write's transaction, before anything is stored.
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

VARIABLE = "STUDIO_PROJECT_LIMITS"


class ProjectLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset_rows: int = Field(200_000, ge=1, description="Conversations stored in all of a project's datasets "
                                                          "(a row shared by several versions counts once).")
    dataset_bytes: int = Field(1024**3, ge=1024, description="Bytes of those conversations as JSON (1 GiB).")
    dataset_versions: int = Field(1000, ge=1, description="Versions of all of a project's datasets.")
    recorded_calls: int = Field(1_000_000, ge=1, description="Calls recorded through runs' endpoints (external "
                                                             "rollouts) kept at once.")
    exports: int = Field(50, ge=1, description="Merged model exports of the project's checkpoints.")
    checkpoint_bytes: int = Field(200 * 1024**3, ge=1024, description="Disk used by the project's runs' "
                                                                      "checkpoints (200 GiB); a launch is refused "
                                                                      "over it.")
    webhooks: int = Field(10, ge=1, description="Notification webhooks of the project (webapp/notifications/).")


# How the page and the errors say each limit, and whether it counts bytes (413) or things (409).
LABELS = {"dataset_rows": "dataset rows", "dataset_bytes": "dataset bytes", "dataset_versions": "dataset versions",
          "recorded_calls": "recorded calls", "exports": "exports", "checkpoint_bytes": "checkpoint disk",
          "webhooks": "webhooks"}
BYTE_LIMITS = frozenset({"dataset_bytes", "checkpoint_bytes"})


def parse_limits(text: str | None) -> ProjectLimits:
    """The limits from the setting's JSON text (empty: the defaults); a ValueError naming the problem otherwise."""
    if not (text or "").strip():
        return ProjectLimits()
    try:
        data: Any = json.loads(text or "")
    except json.JSONDecodeError as err:
        raise ValueError(f"{VARIABLE} is not JSON: {err.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{VARIABLE} must be a JSON object of limits, e.g. {{\"dataset_rows\": 100000}}")
    try:
        return ProjectLimits.model_validate(data)
    except PydanticValidationError as err:  # names every bad key and why
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise ValueError(f"{VARIABLE}: {problems}") from None


def project_limits() -> ProjectLimits:
    return settings.STUDIO_PROJECT_LIMITS


class LimitExceeded(ValidationError):
    """A write that would take a project over one of its limits; nothing of it is stored."""

    def __init__(self, limit_name: str, limit: int, usage: int, *, adding: int = 0) -> None:
        self.limit_name, self.limit, self.usage, self.adding = limit_name, limit, usage, adding
        self.status = 413 if limit_name in BYTE_LIMITS else 409
        label = LABELS.get(limit_name, limit_name)
        wanted = f"; this would add {_amount(limit_name, adding)}" if adding else ""
        super().__init__(f"project limit {limit_name} exceeded: the project uses {_amount(limit_name, usage)} of "
                         f"its {_amount(limit_name, limit)} {label}{wanted}. Delete what it no longer needs or ask "
                         "the site's administrators for a higher limit.")

    def as_body(self) -> dict[str, Any]:
        return {"detail": self.messages[0], "limit_name": self.limit_name, "limit": self.limit, "usage": self.usage}


def _amount(limit_name: str, value: int) -> str:
    return f"{value:,} bytes" if limit_name in BYTE_LIMITS else f"{value:,}"


def limit_check(*, limit_name: str, usage: int, adding: int = 1) -> None:
    """Refuses adding `adding` to `usage` when the sum goes over the project's limit `limit_name`. `adding=0`
    (a write whose size is not known yet, as a run's checkpoints): refuses once the usage reaches the limit."""
    limit = getattr(project_limits(), limit_name)
    if usage + adding > limit or (adding == 0 and usage >= limit):
        raise LimitExceeded(limit_name, limit, usage, adding=adding)
