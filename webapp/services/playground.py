"""The rubric playground: re-score stored groups with a candidate rubric (or another judge model) before spending
GPU time, and compare with the version the run used and with the human labels.

`playground_create` stores a Rescore and hands it to the `judge` queue (Celery) or the in-process judge pool;
`playground_execute` does the work there. Runs are never touched: results live on the Rescore row.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from datetime import timedelta
from typing import Any, Iterator

from django.conf import settings

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.models import JudgeConfig, Project, Rescore, Role, RubricVersion, Trajectory, TrajectoryGroup
from webapp.services.access import require_role
from webapp.services.catalogue import _clean_criteria, rubric_version_create
from webapp.services.secrets import secret_decrypt

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
        from webapp.execution.executors import submit_rescore

        transaction.on_commit(lambda: submit_rescore(rescore.id))
    return rescore


def _litellm_params(judge: JudgeConfig, temperature: float) -> dict[str, Any]:
    params: dict[str, Any] = {"timeout": 120}
    if judge.api_base:
        params["api_base"] = judge.api_base
    if judge.api_key_env:
        key = os.environ.get(judge.api_key_env)
        if not key:
            raise ValueError(f"the judge's API key variable {judge.api_key_env} is not set on this worker")
        params["api_key"] = key
    elif judge.api_key_encrypted:
        params["api_key"] = secret_decrypt(token=judge.api_key_encrypted)
    if temperature:
        params["temperature"] = temperature
    return params


def _ranks(scores: list[float | None]) -> list[int | None]:
    """Competition ranks (1 = best, ties share the better rank), so reshuffled ties are not counted as changes."""
    return [None if s is None else 1 + sum(o is not None and o > s for o in scores) for s in scores]


def _group_record(group: TrajectoryGroup, trajectories: list[Trajectory], judgement: Any) -> dict[str, Any]:
    current = [t.judge_score if t.judge_score is not None else t.reward for t in trajectories]
    new = [s.score for s in judgement.scores] if judgement is not None else [None] * len(trajectories)
    old_rank, new_rank = _ranks(current), _ranks(new)
    rows = []
    for i, t in enumerate(trajectories):
        rows.append({
            "id": t.id, "index": t.index, "answer": t.final_answer[:ANSWER_PREVIEW], "human": t.override_score,
            "current": current[i], "new": new[i], "rank_current": old_rank[i], "rank_new": new_rank[i],
            "delta": None if new[i] is None or current[i] is None else new[i] - current[i],
            "explanation": judgement.scores[i].explanation if judgement is not None else "",
            "criteria": dict(judgement.scores[i].criteria) if judgement is not None else {},
        })
    return {"group_id": group.id, "run_id": group.run_id, "step": group.step_index, "group_index": group.index,
            "scenario": group.scenario_external_id, "trajectories": rows,
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
    import judging

    rescore = Rescore.objects.select_related("judge_config").get(pk=rescore_id)
    try:
        groups = list(TrajectoryGroup.objects.filter(pk__in=rescore.group_ids).order_by("run_id", "step_index", "index"))
        members = {g.id: list(g.trajectories.filter(error="").order_by("index")) for g in groups}
        groups = [g for g in groups if len(members[g.id]) >= 2]
        if not groups:
            raise ValueError("none of the chosen groups has two scored trajectories to compare")
        options: dict[str, Any] = {"passes": rescore.passes}
        if rescore.criteria:
            options["criteria"] = rescore.criteria
        results = asyncio.run(judging.score_groups(
            [[t.messages for t in members[g.id]] for g in groups], rescore.judge_model, rubric=rescore.rubric_text,
            extra_litellm_params=_litellm_params(rescore.judge_config, rescore.temperature),
            concurrency=rescore.judge_config.concurrency, return_exceptions=True, **options))
    except Exception as err:  # noqa: BLE001 - shown on the playground page, never dropped
        Rescore.objects.filter(pk=rescore_id).update(status=Rescore.Status.FAILED, error=f"{type(err).__name__}: {err}",
                                                     finished_at=timezone.now())
        return Rescore.Status.FAILED
    records, calls, costs, fresh_tokens = [], 0, [], [0, 0]
    for group, result in zip(groups, results):
        if isinstance(result, Exception):
            record = _group_record(group, members[group.id], None)
            record["error"] = str(result)
            calls += len(getattr(result, "calls", []) or [])
        else:
            record = _group_record(group, members[group.id], result)
            calls += len(result.calls)
            costs.append(result.cost_usd)
            fresh_tokens[0] += result.prompt_tokens or 0
            fresh_tokens[1] += result.completion_tokens or 0
        records.append(record)
    judged = [r for r in results if not isinstance(r, Exception)]
    summary = {
        "new_vs_human": _agreement(records, "new", "human"),
        "current_vs_human": _agreement(records, "current", "human"),
        "new_vs_current": _agreement(records, "new", "current"),
        "cost_usd": None if any(c is None for c in costs) else float(sum(costs)),
        "calls": calls, "cache_hits": sum(c.cache_hit for r in judged for c in r.calls),
        "groups_from_cache": sum(r.cache_hit for r in judged),
        "prompt_tokens": fresh_tokens[0], "completion_tokens": fresh_tokens[1],
        "failed_groups": sum(bool(r["error"]) for r in records),
        "rank_changes": sum(r["rank_changes"] for r in records),
    }
    Rescore.objects.filter(pk=rescore_id).update(status=Rescore.Status.DONE, results=records, summary=summary,
                                                 finished_at=timezone.now())
    return Rescore.Status.DONE


def playground_save_version(*, user, rescore: Rescore, rubric=None) -> RubricVersion:
    """Saves the candidate as a new version of its base rubric (or of `rubric`). Editors only (catalogue)."""
    rubric = rubric or (rescore.base_version.rubric if rescore.base_version else None)
    if rubric is None:
        raise ValidationError({"rubric": ["choose the rubric to save this text as a new version of"]})
    if rubric.project_id != rescore.project_id:
        raise ValidationError({"rubric": ["choose a rubric of this project"]})
    version = rubric_version_create(user=user, rubric=rubric, text=rescore.rubric_text, criteria=rescore.criteria)
    Rescore.objects.filter(pk=rescore.pk).update(saved_version=version)
    rescore.saved_version = version
    return version
