"""Reads for review: side-by-side comparisons with a diff, the review queue, judge-vs-human agreement.

Callers pass objects already fetched through `selectors` (membership checked).
"""
from __future__ import annotations

import difflib
import json
import re
from collections import defaultdict
from typing import Any, Iterable
from urllib.parse import urlencode

from django.db.models import Prefetch, Q, QuerySet
from django.http import Http404

from judging.agreement import compare
from webapp.models import Project, Rescore, Run, RunStatus, ScoreOverride, Trajectory, TrajectoryGroup
from webapp.models.runs import PARKED
from webapp.review_state import step_fate
from webapp.selectors.rewards import group_explanations, group_scenario, groups_view, trajectory_rewards

MAX_COLUMNS = 6

# --- side by side -------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def answer_diff(reference: str, text: str) -> list[tuple[str, str]]:
    """`text` against `reference`, word by word: [("same"|"ins"|"del", chunk)]. Computed here with difflib and
    rendered by an escaping template, so model output never reaches the page as markup."""
    a, b = _TOKEN.findall(reference), _TOKEN.findall(text)
    segments: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            segments.append(("same", "".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            segments.append(("del", "".join(a[i1:i2])))
        if op in ("insert", "replace"):
            segments.append(("ins", "".join(b[j1:j2])))
    return segments


def compare_columns(*, run: Run, trajectory_ids: Iterable[int]) -> list[dict[str, Any]]:
    """One column per picked trajectory (in the order given, at most MAX_COLUMNS), each with its answer diffed
    against the first column's."""
    ids = list(dict.fromkeys(int(i) for i in trajectory_ids))[:MAX_COLUMNS]
    found = {t.id: t for t in Trajectory.objects.filter(pk__in=ids, group__run=run).select_related("group")}
    if len(found) != len(ids) or not ids:
        raise Http404("pick trajectories of this run")
    trajectories = [found[i] for i in ids]
    reference = trajectories[0].final_answer
    history = defaultdict(list)
    for o in ScoreOverride.objects.filter(trajectory_id__in=ids).select_related("user", "run").order_by("-id"):
        history[o.trajectory_id].append(o)
    rewards = trajectory_rewards(run=run, trajectories=trajectories)
    explanations: dict[int, str] = {}
    for group in {t.group_id: t.group for t in trajectories}.values():
        explanations |= group_explanations(trajectories=list(group.trajectories.all()))
    return [{"trajectory": t, "group": t.group, "answer": t.final_answer, "is_reference": i == 0,
             "diff": [] if i == 0 else answer_diff(reference, t.final_answer), "history": history[t.id][:5],
             "r": rewards[t.id], "explanation": explanations.get(t.id, t.explanation),
             "other_sides": trajectory_other_sides(trajectory=t)}
            for i, t in enumerate(trajectories)]


def trajectory_other_sides(*, trajectory: Trajectory) -> list[Trajectory]:
    """The other sides of the trajectory's game (same run, same episode, another role): "the other side of this
    game". Empty for an environment with one player."""
    if not trajectory.episode:
        return []
    return list(Trajectory.objects.filter(group__run_id=trajectory.group.run_id, episode=trajectory.episode)
                .exclude(pk=trajectory.pk).select_related("group").order_by("group__index", "index"))


def group_neighbours(*, group: TrajectoryGroup) -> dict[str, TrajectoryGroup | None]:
    """The groups before and after this one in the run (step, then group index): keyboard navigation."""
    qs = TrajectoryGroup.objects.filter(run_id=group.run_id).only("id", "step_index", "index")
    before = Q(step_index__lt=group.step_index) | Q(step_index=group.step_index, index__lt=group.index)
    after = Q(step_index__gt=group.step_index) | Q(step_index=group.step_index, index__gt=group.index)
    return {"previous": qs.filter(before).order_by("-step_index", "-index").first(),
            "next": qs.filter(after).order_by("step_index", "index").first()}


def scenario_steps(*, run: Run, scenario_id: str) -> QuerySet[TrajectoryGroup]:
    return run.groups.filter(scenario_external_id=scenario_id).order_by("step_index", "index")


def scenario_default_pair(*, run: Run, scenario_id: str) -> list[int]:
    """The best trajectory of the scenario's first group and of its latest: what changed over training."""
    groups = list(scenario_steps(run=run, scenario_id=scenario_id))
    if not groups:
        raise Http404("this scenario was not rolled out in this run")
    picks = []
    for group in dict.fromkeys([groups[0], groups[-1]]):
        best = group.trajectories.order_by("rank", "index").first()
        if best is not None:
            picks.append(best.id)
    return picks


# --- the review queue ---------------------------------------------------------------------------------------
# Deliberately simple, documented heuristics (docs/webapp.md), each a reason shown to the reviewer:
DISAGREEMENT_MIN = 0.1  # mean std of a trajectory's score across judge passes
# Two distinct trajectories scored this close: their order is a coin flip. It orders the queue and flags nothing:
# as a flag it fired on most groups of a healthy run (the smallest of seven gaps between eight scores in 0..1 is
# usually under 0.05: 89 % of groups at group size 8, 53 % at 4, in the run issue 34 reports).
NEAR_TIE_GAP = 0.05
LOW = 0.3  # an explanation "contradicts" a score at or below this
# A high score explained with negative words is not flagged: judges explain the best answer by what the others
# got wrong ("unlike B, it does not invent a window"), so that rule flagged nearly every group; no labelled data
# supports it. NEGATIVE only keeps a mixed explanation from counting as praise.
NEGATIVE = re.compile(r"\b(incorrect|wrong|fails?|failed|invalid|illegal|irrelevant|hallucinat\w*|unfaithful|"
                      r"inaccurate|missing|does not|doesn't|did not|didn't|no answer)\b", re.I)
POSITIVE = re.compile(r"\b(correct|excellent|perfect|faithful|accurate|complete|best|great)\b", re.I)


def _contradiction(t: Trajectory) -> str | None:
    score, text = t.judge_score, t.explanation or ""
    if score is None or not text:
        return None
    if score <= LOW and POSITIVE.search(text) and not NEGATIVE.search(text):
        return f"explanation sounds positive (“{POSITIVE.search(text).group(0)}”) for a low score {score:.2f}"
    return None


def _near_tie_gap(scored: list[Trajectory]) -> float | None:
    """The smallest gap between two distinct judge scores of the group, or None (fewer than two)."""
    values = sorted({round(t.judge_score, 6) for t in scored if t.judge_score is not None}, reverse=True)
    gaps = [a - b for a, b in zip(values, values[1:])]
    return min(gaps) if gaps else None


def group_review_signals(group: TrajectoryGroup, trajectories: list[Trajectory]) -> list[tuple[float, str]]:
    """(strength 0..1, reason) for each sign that the judge may have this group wrong. A near-tie is not one of
    them: it orders the queue only (NEAR_TIE_GAP, docs/webapp.md)."""
    signals: list[tuple[float, str]] = []
    scored = [t for t in trajectories if t.reward is not None and not t.error]
    if group.zero_variance and len(scored) >= 2:
        signals.append((0.3, "zero variance: every trajectory got the same reward, so the group teaches nothing"))
    judge = next((t.metadata.get("judge") for t in trajectories if (t.metadata or {}).get("judge")), None) or {}
    if (judge.get("disagreement") or 0) >= DISAGREEMENT_MIN:
        signals.append((min(1.0, judge["disagreement"] / (3 * DISAGREEMENT_MIN)),
                        f"judge passes disagree (mean spread {judge['disagreement']:.2f})"))
    for t in scored:
        if (why := _contradiction(t)) is not None:
            signals.append((1.0, f"answer {t.label}: {why}"))
    return signals


def group_review_reasons(group: TrajectoryGroup, trajectories: list[Trajectory]) -> list[str]:
    return [reason for _, reason in group_review_signals(group, trajectories)]


# What each flag is called in the queue's summary, by how its reason starts.
FLAG_KINDS = (("zero variance", "zero variance"), ("judge passes disagree", "judge passes disagree"),
              ("answer ", "explanation contradicts the score"))


def flag_kind(reason: str) -> str:
    return next((kind for prefix, kind in FLAG_KINDS if reason.startswith(prefix)), "other")


def review_value(*, signals: list[tuple[float, str]], labelled: int, size: int, pending: bool,
                 judge_error_rate: float) -> float:
    """Expected value of a person's look at a group (docs/webapp.md): how strongly the judge may be wrong here
    (the signals, summed) × how often it has been wrong when people checked (judge_error_rate, 1 − the run's
    pairwise agreement, 0.5 before any labels) × whether the look can still change training (a step that has
    not trained counts double) × what is left to label."""
    evidence = sum(strength for strength, _ in signals)
    left = 1.0 - labelled / size if size else 0.0
    return evidence * (0.5 + judge_error_rate) * (2.0 if pending else 1.0) * (0.2 + 0.8 * left)


def review_queue(*, run: Run) -> list[dict[str, Any]]:
    """Every flagged group of the run (no cap: pages and the API page through them), ranked by the expected
    value of a review (review_value), then by how near its closest two judge scores are (a near-tie orders,
    it does not flag), each with its reasons, strongest first."""
    groups = (run.groups.order_by("-step_index", "index")
              .prefetch_related(Prefetch("trajectories", queryset=Trajectory.objects.order_by("rank", "index"))))
    pairwise = run_agreement(run=run)["overall"]["pairwise"]
    error_rate = 0.5 if pairwise is None else 1.0 - pairwise
    queue = []
    for group in groups.iterator(chunk_size=200):
        trajectories = list(group.trajectories.all())
        signals = sorted(group_review_signals(group, trajectories), key=lambda s: -s[0])
        if not signals:
            continue
        labelled = sum(t.override_score is not None for t in trajectories)
        pending = group.step_index > run.reviewed_through_step and not run.is_final
        value = review_value(signals=signals, labelled=labelled, size=len(trajectories), pending=pending,
                             judge_error_rate=error_rate)
        gap = _near_tie_gap([t for t in trajectories if t.reward is not None and not t.error])
        queue.append({"group": group, "reasons": [r for _, r in signals], "labelled": labelled,
                      "size": len(trajectories), "value": round(value, 3), "pending": pending,
                      "near_tie_gap": None if gap is None else round(gap, 6),
                      "near_tie": gap is not None and gap < NEAR_TIE_GAP})
    queue.sort(key=lambda item: (-item["value"], 2.0 if item["near_tie_gap"] is None else item["near_tie_gap"],
                                 -item["group"].step_index, item["group"].index))
    return queue


def review_queue_summary(*, run: Run, queue: list[dict[str, Any]]) -> dict[str, Any]:
    """How many of the run's groups the queue flags, and how many for each kind of reason (a group with two
    kinds counts in both)."""
    kinds: dict[str, int] = defaultdict(int)
    for item in queue:
        for kind in dict.fromkeys(flag_kind(r) for r in item["reasons"]):
            kinds[kind] += 1
    return {"groups": run.groups.count(), "flagged": len(queue),
            "by_kind": sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))}


# --- agreement ----------------------------------------------------------------------------------------------

def _machine(t: Trajectory) -> float | None:
    """The judge's score; for a run without a judge, the reward it trained on (the env reward)."""
    return t.judge_score if t.judge_score is not None else t.reward


def _report(groups: list[list[Trajectory]]) -> dict[str, Any]:
    labelled = [g for g in groups if sum(t.override_score is not None for t in g) >= 2]
    report = compare([[_machine(t) for t in g] for g in labelled], [[t.override_score for t in g] for g in labelled])
    return {"pairwise": report.pairwise, "spearman": report.spearman, "kendall_tau": report.kendall_tau,
            "groups": len(labelled), "pairs": sum(x.pairs for x in report.groups),
            "labels": sum(t.override_score is not None for g in labelled for t in g)}


def _labelled_groups(trajectories: QuerySet[Trajectory]) -> dict[int, list[Trajectory]]:
    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajectories.order_by("group_id", "index"):
        groups[t.group_id].append(t)
    return groups


def run_agreement(*, run: Run) -> dict[str, Any]:
    """Judge vs human over the run and per step. Only groups with at least two human labels count."""
    touched = Trajectory.objects.filter(group__run=run, override_score__isnull=False).values("group_id")
    rows = Trajectory.objects.filter(group_id__in=touched).select_related("group")
    groups = _labelled_groups(rows)
    by_step: dict[int, list[list[Trajectory]]] = defaultdict(list)
    for members in groups.values():
        by_step[members[0].group.step_index].append(members)
    # Every human score counts here, so this page and the queue's "labelled" column say the same; the agreement
    # figures use only groups with two or more (one label has nothing to rank against).
    return {"overall": _report(list(groups.values())), "human_scores": touched.count(),
            "labelled_groups": len(groups),
            # only steps with something to plot: a step whose groups have one label each has no agreement yet
            "steps": [row for step in sorted(by_step) if (row := {"step": step, **_report(by_step[step])})["groups"]]}


def project_agreement_by_version(*, project: Project) -> list[dict[str, Any]]:
    """Judge vs human per rubric version, over every run of the project."""
    touched = Trajectory.objects.filter(group__run__project=project, override_score__isnull=False).values("group_id")
    rows = Trajectory.objects.filter(group_id__in=touched).select_related("rubric_version__rubric")
    by_version: dict[Any, list[list[Trajectory]]] = defaultdict(list)
    for members in _labelled_groups(rows).values():
        by_version[members[0].rubric_version].append(members)
    out = [{"version": v, "label": str(v) if v else "no rubric (default or env reward)", **_report(gs)}
           for v, gs in by_version.items()]
    return sorted(out, key=lambda r: (r["version"] is None, str(r["label"])))


def group_redo_overrides(*, group: TrajectoryGroup) -> list[ScoreOverride]:
    """The human scores given to earlier rollouts of this group (its step was rolled out again), with what became
    of each: carried here or discarded (webapp/live/override_redo.py)."""
    return list(ScoreOverride.objects.filter(run_id=group.run_id, step_index=group.step_index, group_index=group.index)
                .filter(~Q(redo="") | Q(kind=ScoreOverride.Kind.CARRIED))
                .select_related("user", "run").order_by("id"))


def run_pending_overrides(*, run: Run) -> dict[str, Any] | None:
    """Human scores on steps that have not trained yet (None if there are none or the run has ended): what a
    person must be told before the run is parked or resumed, since either may roll those steps out again.
    Only steps whose fate (webapp/review_state.py, as every card says) is a redo, now or after a park, count:
    a paused run's, a parked one's, and a failed or crashed one's, whose Resume starts from its checkpoint."""
    if run.status not in (RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CRASHED):
        return None
    pending = [step for step in (Trajectory.objects.filter(group__run=run, override_score__isnull=False,
                                                           group__step_index__gt=run.reviewed_through_step)
                                 .values_list("group__step_index", flat=True))
               if step_fate(run, step) in ("redo", "redo_if_parked")]
    steps = sorted(set(pending))
    if not steps:
        return None
    checkpoint = run.checkpoints.order_by("-step_index").values_list("step_index", flat=True).first()
    return {"count": len(pending), "steps": steps, "parked": run.worker == PARKED,
            "stopped": run.status in (RunStatus.FAILED, RunStatus.CRASHED), "checkpoint": checkpoint}


def run_review_waiting_step(*, run: Run) -> int | None:
    """The step a gated run's engine holds at its review, scored and not approved (the engine asked for it after
    it last started, and nobody approved or was handed it since); None otherwise. A run paused before that review
    began stays paused (live/ingest.py), and Resume then opens the review instead of training the step."""
    if not run.review_gate or run.worker == PARKED:
        return None
    started = run.events.filter(kind="run_started").order_by("-seq").values_list("seq", flat=True).first() or 0
    asked = (run.events.filter(kind="review_requested", seq__gt=started).order_by("-seq")
             .values_list("payload", flat=True).first())
    step = int((asked or {}).get("step") or 0)
    return step if step > max(run.review_approved_step, run.reviewed_through_step) else None


def run_overrides(*, run: Run, limit: int = 200) -> QuerySet[ScoreOverride]:
    return run.overrides.select_related("user", "run").order_by("-id")[:limit]


# --- several runs, one chart --------------------------------------------------------------------------------

def runs_overlay(*, project: Project, run_ids: Iterable[int], limit: int = 8) -> list[dict[str, Any]]:
    """Per picked run of the project: its reward curve and judge-vs-human agreement per step, for one chart
    (e.g. rubric v1 against v2). Only series a run can have are included: no judge curve without a judge."""
    ids = list(dict.fromkeys(int(i) for i in run_ids))[:limit]
    runs = {r.id: r for r in project.runs.filter(pk__in=ids).select_related("rubric_version__rubric")}
    out = []
    for run_id in ids:
        run = runs.get(run_id)
        if run is None:
            continue
        steps = list(run.steps.order_by("index").values_list("index", "metrics"))
        agreement = run_agreement(run=run)["steps"]
        out.append({
            # the legend's name: runs may share a name, never an id
            "id": run.id, "name": run.name, "label": f"{run.name} #{run.id}",
            "rubric": str(run.rubric_version) if run.rubric_version else "",
            "reward": [{"step": i, "value": (m or {}).get("reward_mean")} for i, m in steps
                       if (m or {}).get("reward_mean") is not None],
            "judge": [{"step": i, "value": (m or {}).get("judge_mean")} for i, m in steps
                      if run.uses_judge and (m or {}).get("judge_mean") is not None],
            "agreement": [{"step": s["step"], "value": s["pairwise"]} for s in agreement if s["pairwise"] is not None],
        })
    return out


# --- export -------------------------------------------------------------------------------------------------

def rescore_launch_query(*, rescore: Rescore) -> str:
    """The launch form's query for "Launch a run with it": the saved rubric with the judge the candidate was
    scored by, and the agent and scenarios of the newest run whose groups it re-scored."""
    params = {"judge_config": rescore.judge_config_id}
    if rescore.saved_version is not None:
        params["rubric"] = rescore.saved_version.rubric_id
    source = (Run.objects.filter(project=rescore.project, groups__id__in=rescore.group_ids or [])
              .order_by("-id").values("agent_id", "scenario_set_id").first())
    if source is not None:
        params.update(agent=source["agent_id"], scenario_set=source["scenario_set_id"])
    return urlencode(params)


def run_groups_jsonl(*, run: Run, step: int | None = None) -> Iterable[str]:
    """The run's scored groups, one JSON line each, in the format `python -m judging score` reads (judging/cli.py
    GroupLine): re-score them from a terminal. Trajectories are named by their stable labels, so the CLI's output
    matches the pages; a group's id says where it came from."""
    groups = run.groups.order_by("step_index", "index").select_related("scenario")  # a fallback of group_scenario
    if step is not None:
        groups = groups.filter(step_index=step)
    audit = Prefetch("overrides", queryset=ScoreOverride.objects.select_related("user").order_by("id"))
    for group in groups.prefetch_related(Prefetch("trajectories", queryset=Trajectory.objects.order_by("index")
                                                  .prefetch_related(audit))):
        members = [t for t in group.trajectories.all() if t.messages]
        if not members:
            continue
        view = groups_view(run=run, groups=[group])
        line: dict[str, Any] = {"id": f"{run.name}/step{group.step_index}/group{group.index + 1}/"
                                      f"{group.scenario_external_id}",
                                "trajectories": [{"id": t.label, "messages": t.messages,
                                                  "review": _stored_review(t, view[t.id])} for t in members]}
        if members[0].tools:
            line["tools"] = members[0].tools
        if (scenario := group_scenario(group=group)) and scenario["reference"]:
            line["reference"] = scenario["reference"]
        line["review"] = {"step": group.step_index, "group": group.index + 1,
                          "scenario_id": group.scenario_external_id, "reward_mean": group.reward_mean,
                          "reward_std": group.reward_std, "judge_mean": group.judge_mean, "skipped": group.skipped,
                          "scoring_error": group.scoring_error, **({"role": group.role} if group.role else {})}
        yield json.dumps(line, ensure_ascii=False) + "\n"


def _stored_review(t: Trajectory, r: dict[str, Any]) -> dict[str, Any]:
    """One trajectory's review as judging.cli.StoredReview reads it: what the pages show, and its audit."""
    return {"rank": t.rank, "judge_score": r["judge_score"], "explanation": r["explanation"],
            "criteria": t.criteria or {}, "env_reward": r["env_reward"], "human_score": r["human_score"],
            "reward": r["effective_reward"], "trained_reward": r["trained_reward"], "advantage": r["advantage"],
            "overrides": [{"kind": o.kind, "before": o.before, "after": o.after, "reason": o.reason,
                           "user": o.user.username if o.user else None, "at": o.created_at.isoformat(),
                           "applies_to_training": o.applies_to_training} for o in t.overrides.all()],
            **({"role": t.role, "episode": t.episode} if t.role else {})}  # a game's side, and its game


# --- playground: which stored groups to re-score -------------------------------------------------------------

def _disagrees(trajectories: list[Trajectory]) -> bool:
    """A person ordered two answers differently from the judge, or the judge's own passes disagreed."""
    judge = next((t.metadata.get("judge") for t in trajectories if (t.metadata or {}).get("judge")), None) or {}
    if (judge.get("disagreement") or 0) >= DISAGREEMENT_MIN:
        return True
    labelled = [t for t in trajectories if t.override_score is not None and _machine(t) is not None]
    if len(labelled) < 2:
        return False
    report = compare([[_machine(t) for t in labelled]], [[t.override_score for t in labelled]])
    return report.pairwise is not None and report.pairwise < 1.0


def playground_source_run(*, project: Project, run_id: int | None, group_ids: list[int]) -> Run | None:
    """The run the playground re-scores: the run filtered on, or the one run every picked group comes from; None
    when the groups come from several runs (or none). Its rubric version and judge are the page's defaults, so a
    re-score compares against what that run was scored with, not whatever was made last."""
    if run_id is None:
        run_ids = set(TrajectoryGroup.objects.filter(run__project=project, pk__in=group_ids)
                      .values_list("run_id", flat=True))
        run_id = run_ids.pop() if len(run_ids) == 1 else None
    if run_id is None:
        return None
    return (Run.objects.filter(project=project, pk=run_id)
            .select_related("rubric_version__rubric", "judge_config").first())


def playground_groups(*, project: Project, run_id: int | None = None, step: int | None = None, labelled: str = "",
                      disagreement: bool = False, limit: int = 200) -> QuerySet[TrajectoryGroup]:
    """Stored groups of the project, filtered (run, step, human-labelled, disagreement), labelled ones first, then
    the newest; bounded, and unsliced (the form field filters it)."""
    from django.db.models import Count

    ordered = (TrajectoryGroup.objects.filter(run__project=project)
               .annotate(labels=Count("trajectories", filter=Q(trajectories__override_score__isnull=False)))
               .order_by("-labels", "-run_id", "-step_index", "index"))
    if run_id is not None:
        ordered = ordered.filter(run_id=run_id)
    if step is not None:
        ordered = ordered.filter(step_index=step)
    if labelled == "yes":
        ordered = ordered.filter(labels__gt=0)
    elif labelled == "no":
        ordered = ordered.filter(labels=0)
    if disagreement:
        scan = ordered.prefetch_related("trajectories")[: limit * 5]
        ids = [g.id for g in scan if _disagrees(list(g.trajectories.all()))][:limit]
    else:
        ids = list(ordered.values_list("id", flat=True)[:limit])
    return ordered.filter(pk__in=ids).select_related("run")
