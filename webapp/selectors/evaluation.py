"""Read side of held-out evaluations and monitors for the run page (callers have checked membership)."""
from __future__ import annotations

from typing import Any

from training.monitoring.evaluation import verdict
from webapp.models import Run

MONITOR_SERIES = {"mon_length_chars": "answer length (chars)", "mon_repeat_rate": "n-gram repeat rate",
                  "mon_empty_rate": "empty answers", "mon_zero_variance": "zero-variance groups",
                  "mon_kl": "KL to base", "mon_entropy": "entropy on sampled tokens",
                  "mon_truncated": "answers cut off at max_tokens", "judge_mean": "judge score", "env_mean": "env reward"}


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None  # stored metrics are floats (ingest)


def evaluated_win_rates(*, run: Run) -> dict[int, float]:
    """{step: held-out win rate} of every evaluated step (the latest evaluation of a step wins), as the curve and
    the checkpoint table read them; the retention policy keeps the best of these (selectors/retention.py)."""
    rates: dict[int, float] = {}
    for p in run.events.filter(kind="evaluation").order_by("seq").values_list("payload", flat=True):
        rate = (p.get("metrics") or {}).get("eval_win_rate")
        if isinstance(p.get("step"), int):
            rates.pop(p["step"], None)
            if isinstance(rate, (int, float)):
                rates[p["step"]] = float(rate)
    return rates


def run_evaluation_data(*, run: Run) -> dict[str, Any]:
    """The win-rate curve (one point per evaluated step, the latest evaluation of a step wins, with its interval,
    what it rests on and its verdict: better than the base only when the whole interval is above 0.5), the
    monitor series from the step metrics, the alerts, and the checkpoints with their win rates (the best marked)."""
    by_step: dict[int, dict[str, Any]] = {}
    for p in run.events.filter(kind="evaluation").order_by("seq").values_list("payload", flat=True):
        m = p.get("metrics") or {}
        by_step[p["step"]] = {"step": p["step"], "win_rate": m.get("eval_win_rate"), "ci_low": m.get("eval_ci_low"),
                              "ci_high": m.get("eval_ci_high"), "comparisons": m.get("eval_comparisons"),
                              "scenarios": _count(m.get("eval_scenarios")), "samples": _count(m.get("eval_samples")),
                              "verdict": verdict(m.get("eval_ci_low"), m.get("eval_ci_high")),
                              "env_checkpoint": m.get("eval_env_checkpoint"), "env_base": m.get("eval_env_base")}
    curve = [by_step[s] for s in sorted(by_step)]
    monitors: dict[str, list[list[Any]]] = {}
    for step in run.steps.order_by("index"):
        for key in MONITOR_SERIES:
            value = (step.metrics or {}).get(key)
            if isinstance(value, (int, float)):
                monitors.setdefault(key, []).append([step.index, value])
    alerts = list(run.events.filter(kind="monitor_alert").order_by("seq").values_list("payload", flat=True))
    checkpoints = []
    for c in run.checkpoints.order_by("step_index"):
        point = by_step.get(c.step_index) or {}
        checkpoints.append({"checkpoint": c, "best": False, **{key: point.get(key) for key in (
            "win_rate", "ci_low", "ci_high", "scenarios", "samples", "verdict")}})
    rated = [row for row in checkpoints if row["win_rate"] is not None]
    if rated:
        max(rated, key=lambda row: (row["win_rate"], row["checkpoint"].step_index))["best"] = True
    failures = list(run.events.filter(kind="evaluation_failed").order_by("seq").values_list("payload", flat=True))
    trackers = list(run.events.filter(kind="tracker_failed").order_by("seq").values_list("payload", flat=True))
    return {"chart": {"curve": curve, "monitors": monitors, "labels": MONITOR_SERIES}, "alerts": alerts,
            "checkpoints": checkpoints, "failures": failures, "tracker_failures": trackers}
