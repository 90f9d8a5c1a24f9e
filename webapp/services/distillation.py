"""Distillation with the rubric as the filter, in the web app: create the job, run it on the `judge` queue (a
teacher configured like a judge answers, the judge ranks, training/sft/distill.py chooses), review its drafts (edit,
drop, restore) and accept them as the dataset's next version.

Costs are counted and capped like a run's judge costs: the teacher's requests against the teacher's budget
(its JudgeConfig.budget_usd), the judge's against the judge's; once either is spent no new scenario starts and
the job ends as "stopped at a budget" with the drafts made so far. Unpriced models count requests and tokens,
never a made-up cost. Nothing here starts a process or trusts a path: the teacher is an HTTP API chosen among
the project's judges (the administrators' key policy applies to its key as to a judge's), or a checkpoint of
this project's runs, chosen by id and served by the project's inference server (webapp/services/serving.py) under
its served name, never by a path or a host anyone typed.
The feature starts here; its parts: views/distillation.py, templates/webapp/distillation_detail.html, and the
engine's training/sft/distill.py (docs/webapp.md, "Where each feature lives").
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

from egress.failures import failure_detail
from webapp.egress_policy import egress_refusal
from webapp.execution.dispatch import DISTILLATION_EXECUTE, work_enqueue
from webapp.models import Agent, Checkpoint, JudgeConfig, Project, Role, RubricVersion, Scenario, ScenarioSet
from webapp.models.datasets import Dataset, DatasetVersion, Distillation, DistillationDraft
from webapp.server_caps import distillations_admit
from webapp.services.access import require_role
from webapp.services.datasets import dataset_version_create
from webapp.services.playground import _judge_key, judge_request_params
from webapp.services.run_config import judge_options
from webapp.services.serving import (project_server_request, project_server_touch, project_server_wait,
                                     served_adapter_name, serving_adapters_load)
from webapp.storable import storable
from webapp.wording import with_article

log = logging.getLogger(__name__)
ENVIRONMENTS = ("chat", "tools", "game_2048")  # rolled out by a judge-queue worker: no tool server to start
MAX_ANSWERS = 16
MAX_SCENARIOS = 500


def distillation_create(*, user, project: Project, dataset: Dataset, agent: Agent, scenario_set: ScenarioSet,
                        judge_config: JudgeConfig, teacher: JudgeConfig | None = None,
                        teacher_checkpoint: Checkpoint | None = None, rubric_version: RubricVersion | None = None,
                        answers_per_scenario: int = 4, threshold: float = 0.5, max_scenarios: int = 50) -> Distillation:
    """Freezes what the job uses (the training scenarios, the agent's prompt, environment and sampling, the
    teacher, the judge's options) and queues it. The teacher is a judge entry or a checkpoint, exactly one."""
    require_role(user=user, project=project, role=Role.EDITOR)
    errors: dict[str, list[str]] = {}
    for field, obj in (("dataset", dataset), ("agent", agent), ("scenario_set", scenario_set), ("teacher", teacher),
                       ("judge_config", judge_config)):
        if obj is not None and obj.project_id != project.id:
            errors[field] = ["choose one from this project"]
    if teacher_checkpoint is not None and teacher_checkpoint.run.project_id != project.id:
        errors["teacher_checkpoint"] = ["choose a checkpoint of this project's runs"]
    if (teacher is None) == (teacher_checkpoint is None):
        errors.setdefault("teacher", []).append("choose the teacher: a judge entry or a checkpoint of this project, "
                                                "one of the two")
    if rubric_version is not None and rubric_version.rubric.project_id != project.id:
        errors["rubric_version"] = ["choose one from this project"]
    # The teacher's and the judge's API bases pass the egress policy now too: it may have narrowed since saving.
    for field, obj in (("teacher", teacher), ("judge_config", judge_config)):
        if obj is not None and field not in errors and (refusal := egress_refusal(obj.api_base)):
            errors[field] = [f"the {field.split('_')[0]}'s API base: {refusal}"]
    if agent.environment_kind not in ENVIRONMENTS:
        errors["agent"] = [f"distillation rolls out {', '.join(ENVIRONMENTS)} agents; this one's environment is "
                           f"{agent.environment_kind}"]
    if not 2 <= answers_per_scenario <= MAX_ANSWERS:
        errors["answers_per_scenario"] = [f"between 2 and {MAX_ANSWERS}: the judge ranks the answers against each other"]
    if not 0.0 <= threshold <= 1.0:
        errors["threshold"] = ["a judge score, between 0 and 1"]
    if not 1 <= max_scenarios <= MAX_SCENARIOS:
        errors["max_scenarios"] = [f"between 1 and {MAX_SCENARIOS}"]
    scenarios = [{"id": s.external_id, "user_message": s.user_message, "context": s.context or None,
                  "reference": s.reference or None, "metadata": s.metadata}
                 for s in scenario_set.scenarios.filter(split=Scenario.Split.TRAIN, retired=False)
                 .order_by("id")[:max_scenarios]]
    if not scenarios and "scenario_set" not in errors:
        errors["scenario_set"] = ["this scenario set has no training scenarios"]
    if errors:
        raise ValidationError(errors)
    config = {
        "scenarios": scenarios, "system_prompt": agent.system_prompt,
        "environment": {"kind": agent.environment_kind, "options": agent.environment_options or {}},
        "sampling": {"temperature": agent.temperature, "top_p": agent.top_p, "max_tokens": agent.max_tokens},
        "teacher": _teacher_frozen(teacher, teacher_checkpoint),
        "judge": judge_options(judge=judge_config, rubric_text=rubric_version.text if rubric_version else None,
                               criteria=rubric_version.criteria if rubric_version else None,
                               api_key_env=judge_config.api_key_env or None),
    }
    with transaction.atomic():
        distillations_admit(user=user, project=project)  # CapReached (429) over a cap
        job = Distillation.objects.create(
            project=project, dataset=dataset, agent=agent, scenario_set=scenario_set, teacher=teacher,
            teacher_checkpoint=teacher_checkpoint, judge_config=judge_config, rubric_version=rubric_version,
            answers_per_scenario=answers_per_scenario, threshold=threshold, max_scenarios=max_scenarios, config=config,
            created_by=user if getattr(user, "is_authenticated", False) else None)
        transaction.on_commit(lambda: work_enqueue(name=DISTILLATION_EXECUTE, object_id=job.id))
    return job


def _teacher_frozen(teacher: JudgeConfig | None, checkpoint: Checkpoint | None) -> dict[str, Any]:
    if checkpoint is not None:
        return {"model": checkpoint.adapter_name, "name": f"checkpoint of run {checkpoint.run.name}",
                "checkpoint": checkpoint.pk, "base_model": checkpoint.run.config.get("base_model"),
                "served_name": served_adapter_name(checkpoint)}
    if teacher is None:
        return {}
    return {"model": teacher.model, "api_base": teacher.api_base or None, "name": teacher.name}


class _Cancelled(Exception):
    pass


def distillation_execute(*, distillation_id: int) -> str:
    """Runs on the `judge` queue (or the in-process judge pool); returns the final status."""
    if not Distillation.objects.filter(pk=distillation_id, status=Distillation.Status.QUEUED).update(
            status=Distillation.Status.RUNNING, heartbeat_at=timezone.now()):
        return "skipped"  # a redelivered message, or a job cancelled before it started
    job = Distillation.objects.select_related("project", "teacher", "judge_config").get(pk=distillation_id)
    served = job.config.get("teacher", {}).get("checkpoint") is not None
    with _heartbeat(distillation_id) as beat:
        try:
            teacher, model = _served_teacher(job, beat) if served else (None, job.teacher.model)
            results, summary = asyncio.run(_distil(job, teacher, model, beat))
        except _Cancelled:
            Distillation.objects.filter(pk=job.id).update(finished_at=timezone.now())
            return Distillation.Status.CANCELLED
        except Exception as err:  # noqa: BLE001 - shown on the job's page, never dropped
            Distillation.objects.filter(pk=job.id, status=Distillation.Status.RUNNING).update(
                status=Distillation.Status.FAILED, finished_at=timezone.now(),
                error=storable(f"{type(err).__name__}: {failure_detail(err)}"))  # a status, never a reply's body
            return Distillation.Status.FAILED
    with transaction.atomic():
        DistillationDraft.objects.bulk_create(
            DistillationDraft(distillation=job, index=i, scenario_external_id=r.scenario_id[:200],
                              messages=storable(r.messages), tools=storable(r.tools), candidates=r.candidates,
                              rewards=r.rewards, reward=r.reward, judge_score=r.judge_score,
                              explanation=storable(r.explanation), reason=storable(r.error),
                              status=DistillationDraft.Status.PENDING if r.chosen is not None
                              else DistillationDraft.Status.REJECTED)
            for i, r in enumerate(results))
        status = Distillation.Status.STOPPED if summary["stopped"] else Distillation.Status.DONE
        # A job cancelled meanwhile stays cancelled, with the drafts it made (reviewable as a stopped job's are).
        if not Distillation.objects.filter(pk=job.id, status=Distillation.Status.RUNNING).update(
                status=status, summary=summary, finished_at=timezone.now()):
            Distillation.objects.filter(pk=job.id).update(summary=summary, finished_at=timezone.now())
            status = Distillation.objects.values_list("status", flat=True).get(pk=job.id)
    return status


def _served_teacher(job: Distillation, beat: "_Beat") -> tuple[Any, str]:
    """The project's inference server with the teacher checkpoint loaded (started if it is not up), as a client,
    and the name it serves the checkpoint by."""
    from openai import AsyncOpenAI

    from studio.teacher import ServedTeacher

    frozen = job.config["teacher"]
    checkpoint = Checkpoint.objects.select_related("run").filter(pk=frozen["checkpoint"],
                                                                 run__project_id=job.project_id).first()
    if checkpoint is None:
        raise ValueError(f"the teacher checkpoint {frozen['model']} was deleted")
    server, _ = project_server_request(project=job.project, base_model=frozen["base_model"])
    ready = project_server_wait(server_id=server.pk)
    if isinstance(ready, str):
        raise RuntimeError(ready)
    if beat.cancelled.is_set():
        raise _Cancelled
    beat.server_id = ready.pk  # kept in use while the teacher answers
    serving_adapters_load(server=ready, checkpoints=[checkpoint])
    client = AsyncOpenAI(base_url=ready.base_url, api_key=settings.STUDIO_INFERENCE_TOKEN, max_retries=0,
                         timeout=settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S)
    return ServedTeacher(client), served_adapter_name(checkpoint)


async def _distil(job: Distillation, served: Any, model: str, beat: "_Beat") -> tuple[list[Any], dict[str, Any]]:
    from studio.scoring import judge_scorer_from_config
    from studio.teacher import TeacherClient
    from training.config import SamplingConfig
    from training.sft.distill import distil
    from training.environments import RolloutConfig, get_environment, parse_options
    from training.types import Scenario as EngineScenario
    from webapp.judge_budget import judge_key_budget

    config = job.config
    env = get_environment(config["environment"]["kind"])
    rollout = RolloutConfig(config["system_prompt"], SamplingConfig.model_validate(config["sampling"]),
                            parse_options(env, config["environment"]["options"]))
    teacher = served or TeacherClient(
        model=job.teacher.model, params=judge_request_params(judge=job.teacher),
        budget_usd=float(job.teacher.budget_usd) if job.teacher.budget_usd is not None else None,
        concurrency=job.teacher.concurrency)
    scorer = judge_scorer_from_config(config["judge"], api_key=_judge_key(job.judge_config), budget=judge_key_budget())
    judge_budget = float(job.judge_config.budget_usd) if job.judge_config.budget_usd is not None else None
    judge = {"requests": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0,
             "unpriced_requests": 0}
    reasons: list[str] = []

    def on_result(result: Any, group: Any) -> None:
        report = group.judge_report
        if report is not None:
            for key in ("requests", "cache_hits", "prompt_tokens", "completion_tokens"):
                judge[key] += getattr(report, key)
            if report.cost_usd is None:
                judge["unpriced_requests"] += report.requests
            else:
                judge["cost_usd"] += report.cost_usd

    def should_stop() -> bool:
        if beat.cancelled.is_set() and "cancelled" not in reasons:
            reasons.append("cancelled")
        if teacher.spent and "teacher" not in reasons:
            reasons.append("teacher")
        if judge_budget is not None and judge["cost_usd"] >= judge_budget and "judge" not in reasons:
            reasons.append("judge")
        return bool(reasons)

    scenarios = [EngineScenario(**s) for s in config["scenarios"]]
    results = await distil(scenarios=scenarios, env=env, client=teacher, model=model,
                           rollout_config=rollout, n=job.answers_per_scenario, scorer=scorer,
                           threshold=job.threshold, concurrency=max(1, job.judge_config.concurrency),
                           on_result=on_result, should_stop=should_stop)
    stopped = should_stop()
    summary = {"scenarios": len(scenarios), "done": len(results), "chosen": sum(r.chosen is not None for r in results),
               "teacher": teacher.usage(), "judge": judge,
               "stopped": [f"the {who}'s budget of ${budget} is spent" for who, budget in
                           (("teacher", job.teacher.budget_usd if job.teacher else None),
                            ("judge", job.judge_config.budget_usd))
                           if who in reasons] if stopped else [],
               "cancelled": "cancelled" in reasons}
    return results, summary


class _Beat:
    """What the heartbeat thread tells the job: whether a person cancelled it; and which server to keep in use."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.server_id: int | None = None


@contextlib.contextmanager
def _heartbeat(distillation_id: int) -> Iterator[_Beat]:
    """Beats `heartbeat_at` from a thread while the teacher and judge work, so a dead worker's job is failed by
    `distillations_reap_stale` instead of staying "running"; notices a cancel (the row no longer running), and
    marks a served teacher's inference server used, so it does not idle out under the job."""
    from django.db import connection

    stop, beat = threading.Event(), _Beat()

    def run() -> None:
        try:
            while not stop.wait(min(settings.STUDIO_HEARTBEAT_S, settings.STUDIO_SERVE_IDLE_S / 4)):
                try:
                    if not Distillation.objects.filter(pk=distillation_id, status=Distillation.Status.RUNNING).update(
                            heartbeat_at=timezone.now()):
                        beat.cancelled.set()
                    if beat.server_id is not None:
                        project_server_touch(server_id=beat.server_id)
                except Exception:  # a database blip: beat again next time
                    log.warning("distillation %s: heartbeat not recorded", distillation_id, exc_info=True)
                    connection.close()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True, name=f"distillation-{distillation_id}-heartbeat")
    thread.start()
    try:
        yield beat
    finally:
        stop.set()
        thread.join()


def distillations_reap_stale(*, now=None) -> list[int]:
    """Fails every running distillation whose worker stopped beating; returns their ids."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.STUDIO_STALE_AFTER_S)
    reason = (f"the worker stopped sending heartbeats (none for {settings.STUDIO_STALE_AFTER_S:.0f} s): it was "
              "killed or crashed; nothing was saved, start the distillation again")
    stale = Distillation.objects.filter(status=Distillation.Status.RUNNING, heartbeat_at__lt=cutoff)
    return [pk for pk in stale.values_list("id", flat=True)
            if Distillation.objects.filter(pk=pk, status=Distillation.Status.RUNNING, heartbeat_at__lt=cutoff)
            .update(status=Distillation.Status.FAILED, error=reason, finished_at=now)]


REVIEWABLE = (Distillation.Status.DONE, Distillation.Status.STOPPED, Distillation.Status.CANCELLED)
CANCELLABLE = (Distillation.Status.QUEUED, Distillation.Status.RUNNING)


def distillation_cancel(*, user, distillation: Distillation) -> None:
    """Stops a queued job before it starts, or a running one before its next scenario (the worker notices within
    a heartbeat; the scenarios under way finish and their drafts are kept for review)."""
    require_role(user=user, project=distillation.project, role=Role.EDITOR)
    if not Distillation.objects.filter(pk=distillation.pk, status__in=CANCELLABLE).update(
            status=Distillation.Status.CANCELLED, finished_at=timezone.now()):
        distillation.refresh_from_db(fields=["status"])
        raise ValidationError(
            f"{with_article(distillation.get_status_display().lower())} distillation cannot be cancelled")


def distillation_draft_update(*, user, draft: DistillationDraft, action: str, messages: Any = None) -> None:
    """drop, restore (a dropped draft), or edit (new messages, checked as a dataset row is)."""
    from training.sft.data import conversation_parse

    job = draft.distillation
    require_role(user=user, project=job.project, role=Role.EDITOR)
    if job.status not in REVIEWABLE:
        raise ValidationError(f"{with_article(job.get_status_display().lower())} distillation's drafts cannot change")
    if draft.status == DistillationDraft.Status.REJECTED:
        raise ValidationError("no answer reached the threshold for this scenario: there is no draft to change")
    if action == "drop":
        draft.status = DistillationDraft.Status.DROPPED
    elif action == "restore":
        draft.status = DistillationDraft.Status.PENDING
    elif action == "edit":
        row = {"messages": messages, **({"tools": draft.tools} if draft.tools else {})}
        conversation, problems = conversation_parse(row)
        if conversation is None:
            raise ValidationError({"messages": [str(p).removeprefix("line 1: ") for p in problems]})
        draft.messages, draft.edited_by = storable(conversation.as_messages()), user
    else:
        raise ValidationError(f"unknown action {action!r}: drop, restore or edit")
    draft.save(update_fields=["status", "messages", "edited_by"])


def distillation_accept(*, user, distillation: Distillation) -> DatasetVersion:
    """The drafts still pending become the dataset's next version (its latest rows, then these)."""
    require_role(user=user, project=distillation.project, role=Role.EDITOR)
    with transaction.atomic():
        job = Distillation.objects.select_for_update().select_related("dataset").get(pk=distillation.pk)
        if job.status not in REVIEWABLE:
            raise ValidationError(f"{with_article(job.get_status_display().lower())} distillation cannot be accepted")
        teacher = job.config.get("teacher", {}).get("model", "")
        drafts = list(job.drafts.filter(status=DistillationDraft.Status.PENDING).order_by("index"))
        if not drafts:
            raise ValidationError("no draft is left to accept: every one was dropped or below the threshold")
        rows = [{"messages": d.messages, "tools": d.tools, "metadata": {
            "distillation": job.id, "scenario_id": d.scenario_external_id, "teacher": teacher,
            "judge_score": d.judge_score, "reward": d.reward, "edited": d.edited_by_id is not None}} for d in drafts]
        version = dataset_version_create(
            user=user, dataset=job.dataset, rows=rows, source=DatasetVersion.Source.DISTILLATION, append=True,
            note=f"{len(rows)} answer{'s' if len(rows) != 1 else ''} of {teacher} chosen by the judge "
                 f"(best of {job.answers_per_scenario}, score ≥ {job.threshold:g}; distillation {job.id})")
        Distillation.objects.filter(pk=job.id).update(status=Distillation.Status.ACCEPTED, accepted_version=version)
    return version
