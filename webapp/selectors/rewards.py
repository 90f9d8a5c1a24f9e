"""The one place that says what a trajectory is called and what reward it got (DESIGN §8 invariants 2 and 3).

judge score → human override (if any) → effective reward → the reward that reached training → advantage. Every
page (group card, side by side, trajectory page, audit) and the API show what `trajectory_rewards` returns, and
every judge explanation shown to a person goes through `explanation_for_people`, which turns the judge's
presentation numbers ("Attempt 2", "trajectory 3") back into the trajectory's stable label.
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterable

from judging.labels import mentions_judge_ids, relabel
from judging.prompt import canonical
from webapp.models import Run, RunStatus, ScoreOverride, Trajectory, TrajectoryGroup
from webapp.models.runs import trajectory_label
from webapp.review_state import step_fate_note


def _trained(run: Run, step: int) -> tuple[bool, bool]:
    """(handed over to the engine by the review path, trained at all)."""
    handed = step <= run.reviewed_through_step
    # A step the engine finished without asking for review (older engines) trained on the judge's rewards.
    return handed, handed or step <= run.steps_done or run.status == RunStatus.COMPLETED


def trajectory_rewards(*, run: Run, trajectories: Iterable[Trajectory]) -> dict[int, dict[str, Any]]:
    """Per trajectory id: label, judge score, env reward, human score, effective reward, whether its step has
    trained, the reward that trained (None while it has not), advantage, and one sentence saying so."""
    trajectories = list(trajectories)
    applied: dict[int, ScoreOverride] = {}
    for o in (ScoreOverride.objects.filter(trajectory_id__in=[t.id for t in trajectories], applies_to_training=True)
              .order_by("id")):
        applied[o.trajectory_id] = o  # the last change that reached training wins
    steps = {t.group_id: t.group.step_index for t in trajectories}
    out: dict[int, dict[str, Any]] = {}
    for t in trajectories:
        handed, trained = _trained(run, steps[t.group_id])
        effective = t.effective_reward
        trained_reward = None
        if trained:
            last = applied.get(t.id) if handed else None
            trained_reward = last.after if last is not None and last.after is not None else t.reward
        if t.error or t.reward is None:
            note = "failed: no reward, nothing trained"
        elif not trained:
            note = step_fate_note(run, steps[t.group_id], effective)
        elif trained_reward == effective:
            note = f"trained on {trained_reward:.3f}"
        else:
            note = (f"trained on {trained_reward:.3f}; the human score {effective:.3f} came after the step trained "
                    "and is a label only")
        out[t.id] = {"label": t.label, "judge_score": t.judge_score, "env_reward": t.env_reward,
                     "human_score": t.override_score, "effective_reward": effective, "trained": trained,
                     "trained_reward": trained_reward, "advantage": t.advantage, "note": note}
    return out


def trajectory_reward(*, trajectory: Trajectory) -> dict[str, Any]:
    return trajectory_rewards(run=trajectory.group.run, trajectories=[trajectory])[trajectory.id]


# --- the judge's numbering, translated ----------------------------------------------------------------------



def _presentation_labels(trajectories: list[Trajectory], call: dict[str, Any]) -> dict[int, str] | None:
    """Presentation id (1-based, as the judge saw it in this call) → stable label, or None if unknowable."""
    order = call.get("order")
    if not isinstance(order, list) or not all(isinstance(i, int) for i in order):
        return None
    # The judge shows identical trajectories once (judging.core): distinct index → first trajectory with it.
    first_of: dict[str, int] = {}
    for t in sorted(trajectories, key=lambda t: t.index):
        first_of.setdefault(canonical(t.messages or []), t.index)
    distinct = list(first_of.values())
    if len(distinct) != len(order) or any(not 0 <= d < len(distinct) for d in order):
        return None
    return {p + 1: trajectory_label(distinct[d]) for p, d in enumerate(order)}


def _calls(trajectories: list[Trajectory]) -> list[dict[str, Any]]:
    for t in trajectories:
        calls = (t.metadata or {}).get("judge_calls")
        if calls:
            return [c for c in calls if isinstance(c, dict) and not c.get("rejected")]
    return []


def explanation_for_people(*, text: str, trajectories: list[Trajectory],
                           calls: list[dict[str, Any]] | None = None) -> str:
    """`text` (one of this group's judge explanations) with the judge's presentation numbers replaced by the
    stable labels of the pass it came from. `calls`: the judge calls that scored the group (default: the ones
    recorded with the run). Plain text in, plain text out: templates still escape it."""
    if not mentions_judge_ids(text):
        return text
    needles = {json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    accepted = [c for c in calls if not c.get("rejected")] if calls is not None else _calls(trajectories)
    for call in accepted:
        reply = str(call.get("raw_reply") or "")
        if any(n in reply for n in needles) and (labels := _presentation_labels(trajectories, call)):
            return relabel(text, labels)
    return text


def group_explanations(*, trajectories: list[Trajectory]) -> dict[int, str]:
    """Per trajectory id, its explanation as people see it. `trajectories`: the whole group (any order)."""
    members = sorted(trajectories, key=lambda t: t.index)
    return {t.id: explanation_for_people(text=t.explanation, trajectories=members) for t in members}


def groups_view(*, run: Run, groups: Iterable[TrajectoryGroup]) -> dict[int, dict[str, Any]]:
    """Per trajectory id of the given groups (trajectories prefetched or not): rewards and explanation."""
    by_group: dict[int, list[Trajectory]] = defaultdict(list)
    for g in groups:
        for t in g.trajectories.all():
            t.group = g
            by_group[g.id].append(t)
    everyone = [t for ts in by_group.values() for t in ts]
    rewards = trajectory_rewards(run=run, trajectories=everyone)
    for ts in by_group.values():
        for tid, text in group_explanations(trajectories=ts).items():
            rewards[tid]["explanation"] = text
    return rewards


def group_scenario(*, group: TrajectoryGroup) -> dict[str, Any] | None:
    """The scenario as the run was launched with it (its frozen config), not as the catalogue row reads now."""
    for s in (group.run.config or {}).get("scenarios") or []:
        if s.get("id") == group.scenario_external_id:
            return {"user_message": s.get("user_message") or "", "context": s.get("context") or "",
                    "reference": s.get("reference") or ""}
    if group.scenario is not None:
        return {"user_message": group.scenario.user_message, "context": group.scenario.context,
                "reference": group.scenario.reference}
    return None
