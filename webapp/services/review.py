"""Human review: overriding judge scores (audited), reordering a group, approving a gated step, and handing a
step's effective rewards to the engine.

The judge's score is never changed: an override sits beside it (`Trajectory.override_score`) and the effective
reward is the override where there is one. Every change appends a ScoreOverride row. Whether a change reaches
training is decided under the run's row lock against `Run.reviewed_through_step`, the same lock the runner
takes when it hands a step's rewards to the engine, so a change is either in that step's rewards or a label.
"""
from __future__ import annotations

import math
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from webapp.live.ingest import run_override_publish, run_status_publish
from webapp.live.override_redo import group_follow_effective
from webapp.models import Role, Run, RunStatus, ScoreOverride, Trajectory, TrajectoryGroup
from webapp.models.runs import PARKED
from webapp.services.access import require_role
from webapp.services.runs import run_enqueue
from webapp.wording import with_article

REASON_MAX = 2000


def _check_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": ["say why you change the score: the reason is kept in the audit trail"]})
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": [f"the reason is longer than {REASON_MAX} characters"]})
    return reason


def _check_score(score: float | None) -> float | None:
    if score is None:
        return None
    try:
        score = float(score)
    except (TypeError, ValueError):
        raise ValidationError({"score": ["the score must be a number between 0 and 1"]}) from None
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise ValidationError({"score": ["the score must be between 0 and 1 (like the judge's)"]})
    return score


def _set(*, user, run: Run, trajectory: Trajectory, after: float | None, kind: str, reason: str) -> ScoreOverride:
    """Under the run's lock (held by the caller)."""
    before = trajectory.override_score
    trajectory.override_score = after
    trajectory.save(update_fields=["override_score"])
    group = trajectory.group
    return ScoreOverride.objects.create(
        run=run, trajectory=trajectory, group=group, step_index=group.step_index, group_index=group.index,
        trajectory_index=trajectory.index, kind=kind, judge_score=trajectory.judge_score, before=before, after=after,
        reason=reason, applies_to_training=group.step_index > run.reviewed_through_step,
        user=user if getattr(user, "is_authenticated", False) else None)


def _locked_run(run_id: int) -> Run:
    return Run.objects.select_for_update().get(pk=run_id)


def trajectory_override(*, user, trajectory: Trajectory, score: float | None, reason: str) -> ScoreOverride:
    """Sets (or with score None removes) the human score of one trajectory."""
    run = trajectory.group.run
    require_role(user=user, project=run.project, role=Role.REVIEWER)
    score, reason = _check_score(score), _check_reason(reason)
    if trajectory.error or trajectory.reward is None:
        raise ValidationError({"score": ["this trajectory failed and has no reward to override"]})
    with transaction.atomic():
        locked = _locked_run(run.id)
        trajectory.refresh_from_db(fields=["override_score"])
        if score is None and trajectory.override_score is None:
            raise ValidationError({"score": ["there is no override to remove"]})
        kind = ScoreOverride.Kind.CLEAR if score is None else ScoreOverride.Kind.SCORE
        # The same override sent again (a double click on Override, Back and send) changes nothing: the audit
        # keeps one entry, not two identical ones.
        last = trajectory.overrides.order_by("-id").first()
        if (last is not None and score is not None and score == trajectory.override_score == last.after
                and (last.kind, last.reason, last.user_id) == (kind, reason, getattr(user, "id", None))):
            return last
        override = _set(user=user, run=locked, trajectory=trajectory, after=score, kind=kind, reason=reason)
        group_follow_effective(trajectory.group, locked)
        run_override_publish(run_id=run.id, group_id=trajectory.group_id, step=trajectory.group.step_index)
        return override


def group_reorder(*, user, group: TrajectoryGroup, order: list[int], reason: str) -> list[ScoreOverride]:
    """Reorders a group (trajectory ids, best first) by reassigning the group's own effective rewards in the new
    order: the spread of rewards stays what the judge gave, only who gets which changes."""
    run = group.run
    require_role(user=user, project=run.project, role=Role.REVIEWER)
    reason = _check_reason(reason)
    with transaction.atomic():
        locked = _locked_run(run.id)
        scored = {t.id: t for t in group.trajectories.filter(error="", reward__isnull=False)}
        if sorted(order) != sorted(scored) or len(set(order)) != len(order):
            raise ValidationError({"order": ["list every scored trajectory of the group exactly once, best first"]})
        values = sorted((t.effective_reward for t in scored.values()), reverse=True)
        changes = []
        for trajectory_id, value in zip(order, values):
            trajectory = scored[trajectory_id]
            # Every trajectory becomes human-labelled (a reorder is a full human ranking), even where the
            # value happens to equal the judge's.
            if trajectory.override_score != value:
                changes.append(_set(user=user, run=locked, trajectory=trajectory, after=value,
                                    kind=ScoreOverride.Kind.REORDER, reason=reason))
        group_follow_effective(group, locked)
        if changes:
            run_override_publish(run_id=run.id, group_id=group.id, step=group.step_index)
        return changes


def run_review_approve(*, user, run: Run) -> None:
    """awaiting_review → running: the engine receives the step's effective rewards and trains on them."""
    require_role(user=user, project=run.project, role=Role.REVIEWER)
    name = getattr(user, "username", "") or "a reviewer"
    # The step under review is the newest one with groups: a gated run rolls out nothing more until it trains.
    step = TrajectoryGroup.objects.filter(run_id=run.pk).aggregate(step=Max("step_index"))["step"] or 0
    with transaction.atomic():
        awaiting = Run.objects.filter(pk=run.pk, status=RunStatus.AWAITING_REVIEW)
        # A parked run (its engine stopped to free the worker) goes back to the queue, where its lower id puts
        # it ahead of every run launched after it; its next engine trains the same groups on these rewards.
        parked = awaiting.filter(worker=PARKED).update(
            status=RunStatus.QUEUED, worker="", review_approved_step=step, cancel_requested=False,
            phase=f"review approved by {name}; waiting for a worker to train step {step} on the reviewed rewards")
        updated = parked or awaiting.update(status=RunStatus.RUNNING, review_approved_step=step,
                                            phase=f"review approved by {name}; training")
        if not updated:
            raise ValidationError(f"{with_article(run.get_status_display().lower())} run has no review to approve")
        run_status_publish(run_id=run.pk)
        if parked:
            run_enqueue(run=run)


def run_review_rewards(*, run_id: int, step: int) -> dict[str, Any]:
    """The answer to the engine's review request: per group index, every trajectory's effective reward (in
    trajectory order). Marks the step as handed over, so later overrides on it are labels."""
    with transaction.atomic():
        run = _locked_run(run_id)
        rewards: dict[str, list[float | None]] = {}
        for group in TrajectoryGroup.objects.filter(run=run, step_index=step).prefetch_related("trajectories"):
            trajectories = sorted(group.trajectories.all(), key=lambda t: t.index)
            rewards[str(group.index)] = [t.effective_reward for t in trajectories]
        if step > run.reviewed_through_step:
            Run.objects.filter(pk=run.pk).update(reviewed_through_step=step)
    return {"step": step, "rewards": rewards}
