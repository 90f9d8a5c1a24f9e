"""The judge's one error type: every failure the caller should see ends here, with a message saying what to do."""
from __future__ import annotations

from typing import Any


class JudgeError(Exception):
    """The judge could not produce a trustworthy score for a group.

    Raised for bad options, unusable judge replies (after the corrective retries), transport failures that
    outlasted the retries, and authentication / configuration errors from the judge API. `calls` holds the
    JudgeCall records of requests already made (and paid for) before the failure, for accounting. `outage` says
    how the judge's provider failed when it is down or limiting (429, 5xx, unreachable) beyond the retries,
    e.g. "openai/gpt-4o answered 503": asking later may succeed, so a run waits for it instead of failing.
    """

    def __init__(self, message: str, *, calls: list[Any] | None = None, outage: str | None = None) -> None:
        super().__init__(message)
        self.calls: list[Any] = list(calls or [])
        self.outage = outage
