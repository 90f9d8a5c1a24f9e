"""Try it (issue 37; docs/use.md): ask the base and up to three checkpoints the same question side by side, judge
the answers as one group, keep a conversation as a scenario.

`try_create` checks what a person chose against the project (its agents, its own checkpoints by id, its
scenarios: never a path or a model name typed in), asks for the project's inference server and queues the
rollouts (webapp/execution/trying.py, on the `judge` queue or the embedded executor). `try_judge_request` /
`try_judge_execute` score the answers with a rubric version and a judge, as the playground and runs do.
The feature starts here; its parts: try_forms.py, views/trying.py, execution/trying.py and try_child.py,
live/try_channel.py (the page's websocket), templates/webapp/try*.html, static/webapp/try.js (docs/webapp.md).
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from training.types import trajectory_label
from webapp.execution.dispatch import TRY_EXECUTE, TRY_JUDGE, work_enqueue
from webapp.live.publish import try_session_publish
from webapp.model_catalogue import BaseModelChoiceError, resolve_base_model
from webapp.models import Agent, Checkpoint, JudgeConfig, Project, Role, RubricVersion, Scenario, ScenarioSet, TrySession
from webapp.selectors.rewards import explanation_for_people
from webapp.server_caps import try_sessions_admit
from webapp.services.access import require_role
from webapp.services.catalogue import scenario_create
from webapp.services.checkpoint_retention import checkpoints_mark_served
from webapp.services.serving import SERVED_BASE, project_server_request, served_adapter_name
from webapp.storable import storable

MAX_CHECKPOINTS = 3
MESSAGE_MAX = 20_000


def _final_answer(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages or []):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""


def try_create(*, user, project: Project, agent: Agent, checkpoint_ids: list[int], include_base: bool = True,
               system_prompt: str | None = None, message: str = "", context: str = "",
               scenario: Scenario | None = None) -> TrySession:
    """A session asking the base (unless left out) and the chosen checkpoints. Editors: it runs the agent's tools
    and spends the server's time."""
    require_role(user=user, project=project, role=Role.EDITOR)
    errors: dict[str, list[str]] = {}
    if agent.project_id != project.id:
        errors["agent"] = ["choose an agent of this project"]
    ids = list(dict.fromkeys(int(i) for i in checkpoint_ids))
    checkpoints = {c.pk: c for c in Checkpoint.objects.select_related("run").filter(pk__in=ids, run__project=project)}
    if len(checkpoints) != len(ids):
        errors["checkpoints"] = ["choose checkpoints of this project's runs"]
    elif len(ids) > MAX_CHECKPOINTS:
        errors["checkpoints"] = [f"choose at most {MAX_CHECKPOINTS} checkpoints"]
    elif not ids and not include_base:
        errors["checkpoints"] = ["choose the base model, a checkpoint, or both"]
    try:  # the deployment's model the agent names; a path stored before the catalogue is never loaded
        model = resolve_base_model(agent.base_model)
    except BaseModelChoiceError as err:
        model = None
        errors.setdefault("agent", [f"agent {agent.name}: {err}"])
    others = sorted({c.run.config.get("base_model") for c in checkpoints.values()} - {model.source if model else None})
    if others and model is not None and "agent" not in errors:
        errors["checkpoints"] = [f"these checkpoints were trained on {', '.join(map(str, others))}, not on the agent's "
                                 f"base model {model.name}: choose checkpoints of runs on the same base model"]
    if scenario is not None and scenario.scenario_set.project_id != project.id:
        errors["scenario"] = ["choose a scenario of this project"]
    if scenario is not None:
        message, context = scenario.user_message, scenario.context
    message, context = (message or "").strip(), (context or "").strip()
    if not message:
        errors["message"] = ["write a message, or choose a scenario"]
    elif len(message) > MESSAGE_MAX or len(context) > MESSAGE_MAX:
        errors["message"] = [f"the message and the context may be {MESSAGE_MAX} characters each at most"]
    if errors:
        raise ValidationError(errors)
    columns = ([{"label": "base", "checkpoint_id": None, "model": SERVED_BASE}] if include_base else []) + [
        {"label": checkpoints[i].adapter_name, "checkpoint_id": i, "model": served_adapter_name(checkpoints[i]),
         "run_id": checkpoints[i].run_id} for i in ids]
    with transaction.atomic():
        assert model is not None  # refused above
        try_sessions_admit(user=user, project=project)  # CapReached (429) over a cap
        server, started = project_server_request(project=project, base_model=model.source)
        session = TrySession.objects.create(
            project=project, agent=agent, created_by=user, base_model=model.source,
            system_prompt=agent.system_prompt if system_prompt is None else system_prompt[:20_000],
            scenario=scenario, user_message=message, context=context, columns=columns, server=server,
            server_started=started, answers=[{"status": "waiting", "messages": [], "tools": None, "error": "",
                                              "seconds": None} for _ in columns])
        checkpoints_mark_served(checkpoint_ids=ids)  # kept by the retention policy from now on
        transaction.on_commit(lambda: work_enqueue(name=TRY_EXECUTE, object_id=session.pk))
    return session


ENDED = "ended by "  # the error of a session a person ended; the worker stops its rollouts when it sees it


def try_end(*, user, session: TrySession) -> bool:
    """Ends a session still answering (its rollouts stop within a second; the answers in are kept), freeing its
    place under the Try it caps (webapp/server_caps.py). Editors of its project; False when it had ended."""
    require_role(user=user, project=session.project, role=Role.EDITOR)
    active = (TrySession.Status.QUEUED, TrySession.Status.STARTING, TrySession.Status.RUNNING)
    ended = bool(TrySession.objects.filter(pk=session.pk, status__in=active).update(
        status=TrySession.Status.FAILED, error=f"{ENDED}{user.get_username()}"[:5000], finished_at=timezone.now()))
    try_session_publish(session_id=session.pk)
    return ended


def try_judge_request(*, user, session: TrySession, rubric_version: RubricVersion, judge_config: JudgeConfig) -> None:
    """Scores the answers as one group (queued on the judge queue). Reviewers may: it changes no run."""
    require_role(user=user, project=session.project, role=Role.REVIEWER)
    errors: dict[str, list[str]] = {}
    if rubric_version.rubric.project_id != session.project_id:
        errors["rubric_version"] = ["choose a rubric version of this project"]
    if judge_config.project_id != session.project_id:
        errors["judge_config"] = ["choose a judge of this project"]
    answered = sum(a.get("status") == "done" for a in session.answers)
    if session.status != TrySession.Status.DONE or answered < 2:
        errors["session"] = ["judging needs two answers or more: wait until they are in"]
    if session.judge_status in (TrySession.JudgeStatus.QUEUED, TrySession.JudgeStatus.RUNNING):
        errors["session"] = ["these answers are being judged already"]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        TrySession.objects.filter(pk=session.pk).update(
            judge_status=TrySession.JudgeStatus.QUEUED, rubric_version=rubric_version, judge_config=judge_config,
            judge_results=[], judge_error="")
        transaction.on_commit(lambda: work_enqueue(name=TRY_JUDGE, object_id=session.pk))
        try_session_publish(session_id=session.pk)


def try_judge_execute(*, session_id: int) -> str:
    """Runs on the judge queue: one group of the answered columns, the same judge request as a run's."""
    from studio.scoring import judge_scorer_from_config
    from training.types import Scenario as EngineScenario
    from training.types import Trajectory as EngineTrajectory
    from training.types import TrajectoryGroup as EngineGroup
    from webapp.judge_budget import judge_key_budget
    from webapp.services.playground import _judge_key
    from webapp.services.run_config import judge_options

    if not TrySession.objects.filter(pk=session_id, judge_status=TrySession.JudgeStatus.QUEUED).update(
            judge_status=TrySession.JudgeStatus.RUNNING):
        return "skipped"
    try_session_publish(session_id=session_id)
    session = TrySession.objects.select_related("judge_config", "rubric_version").get(pk=session_id)
    judge, version = session.judge_config, session.rubric_version
    answered = [i for i, a in enumerate(session.answers) if a.get("status") == "done"]
    try:
        options = judge_options(judge=judge, rubric_text=version.text, criteria=version.criteria or None,
                                api_key_env=judge.api_key_env or None)
        scorer = judge_scorer_from_config(options, api_key=_judge_key(judge), budget=judge_key_budget())
        scenario = EngineScenario(id=f"try-{session.pk}", user_message=session.user_message,
                                  context=session.context or None)
        group = EngineGroup(scenario=scenario, trajectories=[
            EngineTrajectory(scenario_id=scenario.id, messages=list(session.answers[i]["messages"]),
                             tools=session.answers[i].get("tools") or None) for i in answered])
        labels = [trajectory_label(i) for i in answered]
        scores = asyncio.run(scorer(group, labels=labels))
    except Exception as err:  # noqa: BLE001 - shown on the page, never dropped
        TrySession.objects.filter(pk=session_id).update(judge_status=TrySession.JudgeStatus.FAILED,
                                                        judge_error=storable(f"{type(err).__name__}: {err}"))
        try_session_publish(session_id=session_id)
        return TrySession.JudgeStatus.FAILED
    calls = group.judge_report.calls if group.judge_report is not None else []
    members = [SimpleNamespace(index=i, messages=session.answers[i]["messages"]) for i in answered]
    values = [s.judge_score for s in scores]
    results: list[dict[str, Any]] = [{"score": None, "explanation": "", "criteria": {}, "rank": None}
                                     for _ in session.columns]
    for position, (i, score) in enumerate(zip(answered, scores)):
        results[i] = {"score": score.judge_score, "criteria": dict(score.criteria or {}),
                      "rank": 1 + sum(v is not None and v > score.judge_score for v in values),
                      "explanation": explanation_for_people(text=score.explanation, trajectories=members,
                                                            calls=calls)}
    TrySession.objects.filter(pk=session_id).update(judge_status=TrySession.JudgeStatus.DONE,
                                                    judge_results=storable(results))
    try_session_publish(session_id=session_id)
    return TrySession.JudgeStatus.DONE


def try_save_scenario(*, user, session: TrySession, column: int, scenario_set: ScenarioSet,
                      external_id: str = "") -> Scenario:
    """The session's question as a new scenario of `scenario_set`, the chosen column's answer as its reference
    answer. Editors (the catalogue)."""
    require_role(user=user, project=session.project, role=Role.EDITOR)
    errors: dict[str, list[str]] = {}
    if scenario_set.project_id != session.project_id:
        errors["scenario_set"] = ["choose a scenario set of this project"]
    if not 0 <= column < len(session.answers) or session.answers[column].get("status") != "done":
        errors["column"] = ["choose an answer that is in"]
    if errors:
        raise ValidationError(errors)
    external_id = (external_id or "").strip()[:200] or f"try-{session.pk}-{trajectory_label(column)}"
    return scenario_create(user=user, scenario_set=scenario_set, user_message=session.user_message,
                           external_id=external_id, context=session.context,
                           reference=_final_answer(session.answers[column]["messages"])[:20_000],
                           metadata={"from_try_it": session.pk, "answered_by": session.columns[column]["label"]})
