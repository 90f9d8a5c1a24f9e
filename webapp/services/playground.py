"""The rubric playground: re-score stored groups with a candidate rubric (or another judge model) before spending
GPU time, and compare with the version the run used and with the human labels.

`playground_create` stores a Rescore and hands it to the `judge` queue (Celery) or the in-process judge pool;
`playground_execute` does the work there. Runs are never touched: results live on the Rescore row.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from datetime import timedelta
from typing import Any, Iterator

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.egress_policy import egress_refusal
from webapp.execution.dispatch import PLAYGROUND_RESCORE, work_enqueue
from webapp.judge_keys import judge_key_value
from webapp.models import JudgeConfig, Project, Rescore, Role, RubricVersion, Trajectory, TrajectoryGroup
from webapp.selectors.rewards import explanation_for_people
from webapp.services.access import require_role
from webapp.services.catalogue import _clean_criteria, rubric_create, rubric_version_create
from webapp.services.run_config import judge_options
from webapp.services.secrets import secret_decrypt
from webapp.storable import storable

log = logging.getLogger(__name__)
MAX_GROUPS = 50
ANSWER_PREVIEW = 240


def playground_create(*, user, project: Project, group_ids: list[int], rubric_text: str, judge_config: JudgeConfig,
                      criteria: list[dict[str, Any]] | None = None, judge_model: str = "",
                      temperature: float | None = None, passes: int | None = None,
                      base_version: RubricVersion | None = None) -> Rescore:
    """Reviewers may try rubrics (nothing changes until an editor saves a version)."""
    require_role(user=user, project=project, role=Role.REVIEWER)
    errors: dict[str, list[str]] = {}
    ids = list(dict.fromkeys(int(i) for i in group_ids))
    if not ids:
        errors["group_ids"] = ["choose at least one stored group"]
    elif len(ids) > MAX_GROUPS:
        errors["group_ids"] = [f"choose at most {MAX_GROUPS} groups per re-score"]
    elif TrajectoryGroup.objects.filter(pk__in=ids, run__project=project).count() != len(ids):
        errors["group_ids"] = ["choose groups of runs in this project"]
    if judge_config.project_id != project.id:
        errors["judge_config"] = ["choose a judge of this project"]
    elif refusal := egress_refusal(judge_config.api_base):
        errors["judge_config"] = [f"the judge's API base: {refusal}"]
    if base_version is not None and base_version.rubric.project_id != project.id:
        errors["base_version"] = ["choose a rubric version of this project"]
    if not (rubric_text or "").strip():
        errors["rubric_text"] = ["the rubric text is empty"]
    passes = judge_config.passes if passes is None else int(passes)
    temperature = judge_config.temperature if temperature is None else float(temperature)
    if not 1 <= passes <= 10:
        errors["passes"] = ["passes must be between 1 and 10"]
    if not 0.0 <= temperature <= 2.0:
        errors["temperature"] = ["temperature must be between 0 and 2"]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        rescore = Rescore.objects.create(
            project=project, base_version=base_version, rubric_text=rubric_text.strip(),
            criteria=_clean_criteria(criteria), judge_config=judge_config,
            judge_model=(judge_model or "").strip() or judge_config.model, temperature=temperature, passes=passes,
            group_ids=ids, created_by=user if getattr(user, "is_authenticated", False) else None)
        transaction.on_commit(lambda: work_enqueue(name=PLAYGROUND_RESCORE, object_id=rescore.id))
    return rescore


def _judge_key(judge: JudgeConfig) -> str | None:
    """The key given directly to litellm, if any; a key variable outside the admins' policy, or not set in this
    process, is refused (ValueError)."""
    if judge.api_key_env:  # read here under the one policy (webapp/judge_keys.py), handed to the scorer
        return judge_key_value(api_key_env=judge.api_key_env, api_base=judge.api_base)
    if judge.api_key_encrypted:
        return secret_decrypt(token=judge.api_key_encrypted)
    if judge.api_base:
        return "none"  # else litellm would send the provider's usual variable (OPENAI_API_KEY, …) here
    return None


def judge_request_params(*, judge: JudgeConfig) -> dict[str, Any]:
    """The litellm parameters a request to this judge carries (studio.scoring builds them, for runs too)."""
    from studio.scoring import JudgeScorerOptions, judge_litellm_params

    options = judge_options(judge=judge, rubric_text=None, criteria=None, api_key_env=judge.api_key_env or None)
    return judge_litellm_params(JudgeScorerOptions.model_validate(options), api_key=_judge_key(judge))


def _scorer(rescore: Rescore) -> Any:
    """The training scorer, configured as a run's would be (webapp.services.run_config.judge_options) with the
    candidate's rubric, model, temperature and passes: one request builder and one set of litellm parameters
    for both, so a rank change is the rubric's doing, not the request's."""
    from studio.scoring import judge_scorer_from_config
    from webapp.judge_budget import judge_key_budget

    judge = rescore.judge_config
    options = judge_options(judge=judge, rubric_text=rescore.rubric_text, criteria=rescore.criteria or None,
                            api_key_env=judge.api_key_env or None, model=rescore.judge_model,
                            temperature=rescore.temperature, passes=rescore.passes)
    # Within the budget its key shares with the runs (webapp/judge_budget.py): re-scoring slows them down, never
    # pushes the key past its limit.
    return judge_scorer_from_config(options, api_key=_judge_key(judge), budget=judge_key_budget())


def _engine_group(group: TrajectoryGroup, trajectories: list[Trajectory]) -> Any:
    """A stored group as the engine held it when it was judged: its messages, tools, and the reference answer
    of the scenario in the run's own config (what training sent)."""
    from training.types import Scenario as EngineScenario
    from training.types import Trajectory as EngineTrajectory
    from training.types import TrajectoryGroup as EngineGroup

    spec = next((s for s in group.run.config.get("scenarios") or [] if s.get("id") == group.scenario_external_id),
                None) or {}
    scenario = EngineScenario(id=group.scenario_external_id, user_message=str(spec.get("user_message") or ""),
                              context=spec.get("context"), reference=spec.get("reference"))
    return EngineGroup(scenario=scenario, trajectories=[
        EngineTrajectory(scenario_id=scenario.id, messages=list(t.messages or []), tools=t.tools or None,
                         env_reward=t.env_reward) for t in trajectories])


async def _score_all(scorer: Any, groups: list[Any], labels: list[list[str]]) -> list[Any]:
    """Each group's scores, or the JudgeError that stopped it (its cost is still on the group's report).
    `labels`: per group, its trajectories' labels (failed ones are left out, so positions are not labels)."""
    from judging import JudgeError

    async def one(group: Any, names: list[str]) -> Any:
        try:
            return await scorer(group, labels=names)
        except JudgeError as err:
            return err

    return list(await asyncio.gather(*(one(g, names) for g, names in zip(groups, labels))))


def _ranks(scores: list[float | None]) -> list[int | None]:
    """Competition ranks (1 = best, ties share the better rank), so reshuffled ties are not counted as changes."""
    return [None if s is None else 1 + sum(o is not None and o > s for o in scores) for s in scores]


def _scored_with(trajectories: list[Trajectory]) -> str:
    """The rubric version(s) the stored scores came from: a group keeps the version it was judged with, whatever
    the rubric's latest version is now."""
    names = sorted({str(t.rubric_version) if t.rubric_version_id else
                    ("the default rubric" if t.judge_model else "the env reward") for t in trajectories})
    return ", ".join(names)


def _group_record(group: TrajectoryGroup, trajectories: list[Trajectory], scores: Any,
                  calls: list[dict[str, Any]]) -> dict[str, Any]:
    current = [t.judge_score if t.judge_score is not None else t.reward for t in trajectories]
    new = [s.judge_score for s in scores] if scores is not None else [None] * len(trajectories)
    old_rank, new_rank = _ranks(current), _ranks(new)
    rows = []
    for i, t in enumerate(trajectories):
        rows.append({
            "id": t.id, "index": t.index, "answer": t.final_answer[:ANSWER_PREVIEW], "human": t.override_score,
            "current": current[i], "new": new[i], "rank_current": old_rank[i], "rank_new": new_rank[i],
            "delta": None if new[i] is None or current[i] is None else new[i] - current[i],
            "explanation": explanation_for_people(text=scores[i].explanation, trajectories=trajectories,
                                                  calls=calls) if scores is not None else "",
            "criteria": dict(scores[i].criteria) if scores is not None else {},
        })
    return {"group_id": group.id, "run_id": group.run_id, "step": group.step_index, "group_index": group.index,
            "scenario": group.scenario_external_id, "trajectories": rows, "scored_with": _scored_with(trajectories),
            "rank_changes": sum(r["rank_current"] != r["rank_new"] for r in rows), "error": ""}


def _agreement(results: list[dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    from judging.agreement import compare

    ok = [r for r in results if not r["error"]]
    report = compare([[t[a] for t in r["trajectories"]] for r in ok], [[t[b] for t in r["trajectories"]] for r in ok])
    return {"pairwise": report.pairwise, "spearman": report.spearman, "kendall_tau": report.kendall_tau,
            "groups": sum(g.pairs > 0 for g in report.groups)}


def playground_execute(*, rescore_id: int) -> str:
    """Runs on the `judge` queue (or the in-process judge pool). Returns the final status."""
    if not Rescore.objects.filter(pk=rescore_id, status=Rescore.Status.QUEUED).update(
            status=Rescore.Status.RUNNING, heartbeat_at=timezone.now()):
        return "skipped"  # a redelivered message: someone else has it
    with _heartbeat(rescore_id):
        return _execute(rescore_id)


@contextlib.contextmanager
def _heartbeat(rescore_id: int) -> Iterator[None]:
    """Beats `heartbeat_at` from a thread while the judge works, so `rescores_reap_stale` can tell a slow
    judge from a dead worker."""
    from django.db import connection

    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(settings.STUDIO_HEARTBEAT_S):
                try:
                    Rescore.objects.filter(pk=rescore_id, status=Rescore.Status.RUNNING).update(
                        heartbeat_at=timezone.now())
                except Exception:  # a locked SQLite file or a database blip: beat again next time
                    log.warning("re-score %s: heartbeat not recorded", rescore_id, exc_info=True)
                    connection.close()
        finally:
            connection.close()

    thread = threading.Thread(target=beat, daemon=True, name=f"rescore-{rescore_id}-heartbeat")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def rescores_reap_stale(*, now=None) -> list[int]:
    """Fails every running re-score whose worker stopped beating (killed, out of memory); returns their ids.
    Nothing was stored for them, so starting the re-score again costs only the judge calls."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.STUDIO_STALE_AFTER_S)
    stale = list(Rescore.objects.filter(status=Rescore.Status.RUNNING, heartbeat_at__lt=cutoff)
                 .values_list("id", flat=True))
    reason = (f"the worker stopped sending heartbeats (none for {settings.STUDIO_STALE_AFTER_S:.0f} s): it was "
              "killed or crashed during the re-score; nothing was saved, start it again")
    return [rescore_id for rescore_id in stale
            if Rescore.objects.filter(pk=rescore_id, status=Rescore.Status.RUNNING, heartbeat_at__lt=cutoff)
            .update(status=Rescore.Status.FAILED, error=reason, finished_at=now)]


def _execute(rescore_id: int) -> str:
    rescore = Rescore.objects.select_related("judge_config").get(pk=rescore_id)
    try:
        groups = list(TrajectoryGroup.objects.filter(pk__in=rescore.group_ids).select_related("run")
                      .order_by("run_id", "step_index", "index"))
        members = {g.id: list(g.trajectories.filter(error="").order_by("index")) for g in groups}
        groups = [g for g in groups if len(members[g.id]) >= 2]
        if not groups:
            raise ValueError("none of the chosen groups has two scored trajectories to compare")
        scorer = _scorer(rescore)
        engine_groups = [_engine_group(g, members[g.id]) for g in groups]
        results = asyncio.run(_score_all(scorer, engine_groups, [[t.label for t in members[g.id]] for g in groups]))
    except Exception as err:  # noqa: BLE001 - shown on the playground page, never dropped
        Rescore.objects.filter(pk=rescore_id).update(status=Rescore.Status.FAILED,
                                                     error=storable(f"{type(err).__name__}: {err}"),
                                                     finished_at=timezone.now())
        return Rescore.Status.FAILED
    records = []
    for group, engine_group, result in zip(groups, engine_groups, results):
        failed = isinstance(result, Exception)
        calls = engine_group.judge_report.calls if engine_group.judge_report is not None else []
        record = _group_record(group, members[group.id], None if failed else result, calls)
        record["error"] = str(result) if failed else ""
        records.append(record)
    # Only requests really sent count, in calls, tokens and cost; cache hits are counted apart.
    reports = [g.judge_report for g in engine_groups if g.judge_report is not None]
    costs = [r.cost_usd for r in reports]
    summary = {
        "new_vs_human": _agreement(records, "new", "human"),
        "current_vs_human": _agreement(records, "current", "human"),
        "new_vs_current": _agreement(records, "new", "current"),
        "cost_usd": None if any(c is None for c in costs) else float(sum(costs)),  # type: ignore[arg-type]
        "calls": sum(r.requests for r in reports), "cache_hits": sum(r.cache_hits for r in reports),
        "groups_from_cache": sum(r.requests == 0 and r.cache_hits > 0 for r in reports),
        "identical_groups": sum(r.identical for r in reports),
        "prompt_tokens": sum(r.prompt_tokens for r in reports),
        "completion_tokens": sum(r.completion_tokens for r in reports),
        "failed_groups": sum(bool(r["error"]) for r in records),
        "rank_changes": sum(r["rank_changes"] for r in records),
        "stored_with": ", ".join(sorted({part for r in records for part in r["scored_with"].split(", ")})),
    }
    Rescore.objects.filter(pk=rescore_id).update(status=Rescore.Status.DONE, results=storable(records), summary=summary,
                                                 finished_at=timezone.now())
    return Rescore.Status.DONE


def _new_rubric_name(rescore: Rescore) -> str:
    """A name for the first rubric of what was re-scored: its agent's ("2048 moves rubric"), free in the project."""
    agent = (TrajectoryGroup.objects.filter(pk__in=rescore.group_ids or []).order_by("-run_id")
             .values_list("run__agent__name", flat=True).first())
    title = f"{agent[:180]} rubric" if agent else "Rubric"
    taken = set(rescore.project.rubrics.filter(name__startswith=title).values_list("name", flat=True))
    return next(name for n in range(1, len(taken) + 2) if (name := title if n == 1 else f"{title} ({n})") not in taken)


def playground_save_version(*, user, rescore: Rescore, rubric=None, new_rubric: bool = False) -> RubricVersion:
    """Saves the candidate as a new version of its base rubric (or of `rubric`), or with `new_rubric` as the first
    version of a new rubric: a run scored by its game alone (the guided start's) has no rubric to edit, and a
    newcomer must not have to write one in another form first. Editors only (catalogue)."""
    rubric = rubric or (rescore.base_version.rubric if rescore.base_version else None)
    if rubric is None and new_rubric:
        with transaction.atomic():
            made = rubric_create(user=user, project=rescore.project, name=_new_rubric_name(rescore),
                                 text=rescore.rubric_text, criteria=rescore.criteria)
            version = made.versions.get()
            Rescore.objects.filter(pk=rescore.pk).update(saved_version=version)
        rescore.saved_version = version
        return version
    if rubric is None:
        raise ValidationError({"rubric": ["choose the rubric to save this text as a new version of"]})
    if rubric.project_id != rescore.project_id:
        raise ValidationError({"rubric": ["choose a rubric of this project"]})
    version = rubric_version_create(user=user, rubric=rubric, text=rescore.rubric_text, criteria=rescore.criteria)
    Rescore.objects.filter(pk=rescore.pk).update(saved_version=version)
    rescore.saved_version = version
    return version
