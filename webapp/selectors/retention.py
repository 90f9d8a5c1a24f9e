"""Which of a run's checkpoints its retention policy keeps, and why (issue 47): the one reading that the clean-up
(services/checkpoint_retention.py) acts on and the run page shows, so the page says exactly what is kept.

The policy is the run's frozen `retention` setting (training.config.RetentionConfig; the deployment's
STUDIO_CHECKPOINT_KEEP_LAST when the launch did not choose): the last k steps and the best by held-out win rate.
Whatever the setting, a checkpoint that is served (Try it, its endpoint, a distillation's teacher), that a run was
forked from, or that was exported is kept; so is, for a failed run (which may be resumed), the newest checkpoint
holding the optimizer state a resume reloads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webapp.models import Checkpoint, Distillation, ModelExport, Run, RunStatus
from webapp.selectors.evaluation import evaluated_win_rates


@dataclass
class Retention:
    keep_last: int  # 0: every checkpoint
    keep_best: bool
    # {step: reasons} for each checkpoint row the policy keeps; a row missing here goes once the run has ended
    kept: dict[int, list[str]] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)


def retention_setting(config: dict[str, Any]) -> tuple[int, bool]:
    """(keep_last, keep_best) as the run froze them; a run launched before the setting keeps everything."""
    section = config.get("retention") or {}
    return int(section.get("keep_last") or 0), bool(section.get("keep_best", True))


def checkpoints_retained(*, run: Run) -> Retention:
    keep_last, keep_best = retention_setting(run.config or {})
    rows = list(run.checkpoints.order_by("step_index"))
    policy = Retention(keep_last=keep_last, keep_best=keep_best)
    reasons: dict[int, list[str]] = {c.step_index: [] for c in rows}
    steps = [c.step_index for c in rows]
    if keep_last == 0:
        for step in steps:
            reasons[step].append("this run keeps every checkpoint")
    else:
        for step in steps[-keep_last:]:
            reasons[step].append(f"one of the last {keep_last}")
    rates = {s: r for s, r in evaluated_win_rates(run=run).items() if s in reasons}
    if keep_best and rates:
        best = max(rates, key=lambda s: (rates[s], s))  # the checkpoint table's rule: a tie goes to the later step
        reasons[best].append(f"best held-out win rate ({rates[best]:.0%})")
    by_id = {c.pk: c.step_index for c in rows}
    for c in rows:
        if c.served_at is not None:
            reasons[c.step_index].append(f"served ({c.served_at:%Y-%m-%d})")
    for checkpoint_id, name in Run.objects.filter(parent_checkpoint__in=by_id).values_list("parent_checkpoint", "name"):
        reasons[by_id[checkpoint_id]].append(f"run {name} was forked from it")
    for checkpoint_id in set(ModelExport.objects.filter(checkpoint__in=by_id).values_list("checkpoint", flat=True)):
        reasons[by_id[checkpoint_id]].append("exported")
    for checkpoint_id in set(Distillation.objects.filter(teacher_checkpoint__in=by_id)
                             .values_list("teacher_checkpoint", flat=True)):
        reasons[by_id[checkpoint_id]].append("a distillation's teacher")
    if run.status == RunStatus.FAILED and rows:
        if (resume := _resume_point(rows)) is not None:
            reasons[resume].append("a resume reloads its optimizer state")
    policy.kept = {s: r for s, r in reasons.items() if r}
    policy.dropped = [s for s in steps if not reasons[s]]
    return policy


def _resume_point(rows: list[Checkpoint]) -> int | None:
    """The newest step whose directory holds the optimizer state (training/model/checkpoints.py: every
    checkpoint_every steps and whenever a run stops); a resume takes the adapter of the newest step and this."""
    for c in reversed(rows):
        if c.path and (Path(c.path) / "optimizer.pt").is_file():
            return c.step_index
    return None


def policy_sentence(*, keep_last: int, keep_best: bool) -> str:
    if keep_last == 0:
        return "This run keeps every checkpoint."
    best = " and the best by held-out win rate" if keep_best else ""
    return (f"After the run ends it keeps the last {keep_last}{best}, and any checkpoint that is served, forked "
            "from or exported; the others are deleted.")


def run_retention_view(*, run: Run) -> dict[str, Any]:
    """What the run page's checkpoint list says: the policy, each checkpoint's reasons to stay (or that it goes
    when the run ends), and what was deleted."""
    policy = checkpoints_retained(run=run)
    pruned = run.checkpoints_pruned or {}
    return {"sentence": policy_sentence(keep_last=policy.keep_last, keep_best=policy.keep_best),
            "kept": policy.kept, "ended": run.is_final, "every": policy.keep_last == 0,
            "pruned_steps": pruned.get("steps") or [], "freed_bytes": int(pruned.get("freed_bytes") or 0)}
