"""The stored forms of the engine's `evaluation` and `monitor_alert` events (training.events), for ingest.py."""
from __future__ import annotations

import math
from typing import Any

from webapp.models import Run


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None  # JSON has no NaN


def evaluation_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The stored form of an `evaluation` event (training.events.EvaluationFinished)."""
    metrics = {str(k): _num(v) for k, v in (e.get("metrics") or {}).items()}
    scenarios = [{"scenario_id": str(s.get("scenario_id", "")), "wins": _num(s.get("wins")),
                  "comparisons": int(s.get("comparisons") or 0),
                  "checkpoint_rewards": [_num(r) for r in s.get("checkpoint_rewards") or []],
                  "base_rewards": [_num(r) for r in s.get("base_rewards") or []]}
                 for s in (e.get("scenarios") or []) if isinstance(s, dict)]
    return {"step": int(e["step"]), "model": str(e.get("model", "")), "baseline": str(e.get("baseline", "")),
            "metrics": metrics, "scenarios": scenarios, "on_demand": bool(e.get("on_demand"))}


def alert_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a `monitor_alert` event (training.events.MonitorAlert); the message is engine text,
    shown escaped."""
    return {"step": int(e["step"]), "monitor": str(e.get("monitor", ""))[:50], "value": _num(e.get("value")),
            "threshold": _num(e.get("threshold")), "message": str(e.get("message", ""))[:1000],
            "pause": bool(e.get("pause"))}


def evaluation_failed_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    return {"step": int(e.get("step", -1)), "error": str(e.get("error", ""))[:2000]}
