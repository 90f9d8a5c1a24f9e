"""A run's judge waits for the budget its key shares with other runs (issue 49; studio/key_budget): the engine's
`judge_budget_wait` event becomes the run's phase, e.g. "waiting for OPENAI_API_KEY's shared judge budget (8 in
flight)", until its next phase replaces it. Waiting there is the budget working, not a fault: no alert.
"""
from __future__ import annotations

from typing import Any

from webapp.models import Run, RunStatus


def judge_budget_wait_text(*, key: str, what: str, limit: float) -> str:
    held = f"{limit:g} a minute" if what == "rate" else f"{limit:g} in flight"
    return f"waiting for {key}'s shared judge budget ({held})"


def judge_budget_wait_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    key, what = str(e.get("key") or "its key")[:80], "rate" if e.get("what") == "rate" else "concurrency"
    limit = float(e.get("limit") or 0)
    phase = judge_budget_wait_text(key=key, what=what, limit=limit)
    if run.status != RunStatus.PAUSED:  # a paused run keeps saying why it is paused
        run.phase = phase[:200]
        Run.objects.filter(pk=run.pk).update(phase=run.phase)
    return {"key": key, "what": what, "limit": limit, "text": phase}
