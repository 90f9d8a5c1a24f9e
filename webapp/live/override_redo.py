"""No human score is lost when a step is rolled out again (issue 34): a resume, a parked run's restart or a
re-queued run redoes the step it stopped in, and the new groups replace the recorded ones. Before a replaced
group goes, `overrides_capture` notes its human scores; once its replacement is stored, `overrides_settle`
carries each one to the new trajectory that gives the same answer to the same scenario (a `carried` audit row,
the score on the new trajectory, so the step trains on it), and marks every audit row of the replaced group
`carried` or `discarded` (with that step's redo): none of them says it changed the step's rewards any more.

Also home of `group_follow_effective`, the ranks and reward mean of a group after a human change.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from webapp.models import Run, ScoreOverride, Trajectory, TrajectoryGroup
from webapp.models.runs import trajectory_label

REASON_MAX = 2000


def _answer(t: Trajectory) -> str:
    return " ".join(t.final_answer.split())


@dataclass
class Captured:
    """The human scores of one replaced group, read before its rows go."""
    scenario_id: str
    step: int
    group_index: int
    scores: list[tuple[Trajectory, float]] = field(default_factory=list)  # (old trajectory, its human score)
    rows: dict[int, list[int]] = field(default_factory=dict)  # old trajectory id → its audit rows' ids
    other_rows: list[int] = field(default_factory=list)  # rows of the group without a trajectory


def overrides_capture(*, groups: list[TrajectoryGroup]) -> list[Captured]:
    """What `overrides_settle` needs of the groups about to be replaced (call before deleting them)."""
    captured = []
    for group in groups:
        rows = list(ScoreOverride.objects.filter(group=group).order_by("id").values_list("id", "trajectory_id"))
        if not rows:
            continue
        c = Captured(scenario_id=group.scenario_external_id, step=group.step_index, group_index=group.index)
        for row_id, trajectory_id in rows:
            if trajectory_id is None:
                c.other_rows.append(row_id)
            else:
                c.rows.setdefault(trajectory_id, []).append(row_id)
        for t in group.trajectories.filter(override_score__isnull=False).order_by("index"):
            c.scores.append((t, float(t.override_score)))
        captured.append(c)
    return captured


def overrides_settle(*, run: Run, captured: list[Captured], group: TrajectoryGroup) -> int:
    """Carries the captured human scores of step `group.step_index`, group `group.index` to `group` (the new
    rollout) where the scenario and the answer text are the same; marks the replaced rows. Returns how many
    scores were carried."""
    mine = [c for c in captured if (c.step, c.group_index) == (group.step_index, group.index)]
    if not mine:
        return 0
    candidates = [t for t in Trajectory.objects.filter(group=group).order_by("index") if not t.error
                  and t.reward is not None and t.override_score is None]
    carried = 0
    for c in mine:
        carried_ids: set[int] = set()
        for old, score in c.scores:
            if c.scenario_id != group.scenario_external_id:
                break
            new = next((t for t in candidates if _answer(t) == _answer(old)), None)
            if new is None:
                continue
            candidates.remove(new)
            last = ScoreOverride.objects.filter(pk__in=c.rows.get(old.id, [])).order_by("-id").first()
            note = (f" [carried from answer {trajectory_label(old.index)} of step {c.step}'s discarded rollout: "
                    "same scenario and answer text]")
            reason = ((last.reason if last else "") [:REASON_MAX - len(note)] + note).strip()
            new.override_score = score
            new.save(update_fields=["override_score"])
            ScoreOverride.objects.create(
                run=run, trajectory=new, group=group, step_index=group.step_index, group_index=group.index,
                trajectory_index=new.index, kind=ScoreOverride.Kind.CARRIED, judge_score=new.judge_score,
                before=None, after=score, reason=reason, user=last.user if last else None,
                applies_to_training=group.step_index > run.reviewed_through_step)
            carried_ids.add(old.id)
            carried += 1
        # Audit rows are never rewritten but for this one mark: what became of them at the redo. None of them
        # reached training (its step is being redone), so none may say it did.
        for old_id, row_ids in c.rows.items():
            ScoreOverride.objects.filter(pk__in=row_ids).update(
                redo=ScoreOverride.Redo.CARRIED if old_id in carried_ids else ScoreOverride.Redo.DISCARDED,
                applies_to_training=False)
        ScoreOverride.objects.filter(pk__in=c.other_rows).update(redo=ScoreOverride.Redo.DISCARDED,
                                                                  applies_to_training=False)
    if carried:
        group_follow_effective(group, run)
    return carried


def group_follow_effective(group: TrajectoryGroup, run: Run) -> None:
    """After a human change: the group's ranks (1 = best, unrewarded last) and its reward mean / std follow
    the effective rewards, the ones its step trains on, instead of staying in the judge's order."""
    # Fresh rows, not a prefetch the caller may hold from before the change.
    members = sorted(Trajectory.objects.filter(group=group),
                     key=lambda t: (t.effective_reward is None, -(t.effective_reward or 0.0), t.index))
    for rank, t in enumerate(members, start=1):
        t.rank = rank
    fields = ["rank"]
    if group.step_index > run.reviewed_through_step:
        # The advantages the engine computed from the judge's scores are stale now; it recomputes them from the
        # effective rewards when the step trains (ReviewApplied). Until then no page shows a number for them.
        for t in members:
            t.advantage = None
        fields.append("advantage")
    Trajectory.objects.bulk_update(members, fields)
    rewards = [t.effective_reward for t in members if t.effective_reward is not None]
    group.reward_mean = statistics.fmean(rewards) if rewards else None
    group.reward_std = statistics.pstdev(rewards) if rewards else None
    group.save(update_fields=["reward_mean", "reward_std"])
