"""The stored forms of the engine's `evaluation`, `monitor_alert` and `held_out_loss` events (training.events),
for ingest.py."""
from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from webapp.models import Run
from webapp.run_policy import text_for_people, worker_paths


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


def held_out_loss_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The stored form of an SFT run's `held_out_loss` event (training.events.HeldOutLoss): the run page's
    held-out curve is read from these (step 0: before any training)."""
    return {"step": int(e["step"]), "loss": _num(e.get("loss")), "tokens": int(e.get("tokens") or 0),
            "conversations": int(e.get("conversations") or 0)}



def tracker_failed_payload(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a `tracker_failed` event (training.events.TrackerFailed): an experiment tracker that
    stopped receiving the run's metrics, shown as an alert (the run goes on), without the worker's paths."""
    config = run.config or {}
    trackers = config.get("trackers") or {}
    paths = worker_paths(config, runs_dir=str(settings.STUDIO_RUNS_DIR)) + [
        (str((trackers.get("wandb") or {}).get("dir") or ""), "<the W&B directory>"),
        (str((trackers.get("mlflow") or {}).get("tracking_uri") or ""), "<the MLflow store>"),
        (str((trackers.get("langfuse") or {}).get("host") or ""), "<the Langfuse host>")]
    uri = str((trackers.get("mlflow") or {}).get("tracking_uri") or "")
    if uri.startswith("file:"):  # MLflow's errors name the store's path without its scheme
        paths.append((urlsplit(uri).path, "<the MLflow store>"))
    error = text_for_people(str(e.get("error", "")), paths=paths)
    return {"tracker": str(e.get("tracker", ""))[:50], "error": error[:2000]}
