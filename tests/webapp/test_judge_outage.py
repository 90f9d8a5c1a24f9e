"""A judge outage waits, it does not fail (issue 49): a judge double that answers 503 for a while parks the run
("waiting for the judge: … answered 503 since HH:MM", its worker free), the run asks again on a backoff while
the judge stays down, and completes once it answers, with the group scored before the outage kept as it was.
The embedded executor and the scripted engine, judging through the real judge scorer (litellm, HTTP)."""
from __future__ import annotations

import re
import threading

import pytest
from django.core import mail

from tests.judge_double import HttpError, JudgeDouble
from tests.webapp.conftest import run_story, wait_for
from tests.webapp.factories import (agent_factory, judge_factory, project_factory, rubric_factory, run_factory,
                                    user_factory)
from webapp.execution.executors import wait_idle
from webapp.models import Notification, NotifyEvent, Run, RunStatus, TrajectoryGroup
from webapp.models.runs import PARKED
from webapp.services.runs import run_enqueue

pytestmark = pytest.mark.django_db(transaction=True)


def _run(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def test_a_judge_answering_503_for_a_while_parks_the_run_which_completes_once_it_answers(
        inprocess_executor, scripted_engine, judge_double, settings, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    settings.STUDIO_JUDGE_RETRY_S, settings.STUDIO_JUDGE_RETRY_MAX_S = 0.3, 0.6
    score = JudgeDouble.score_by(lambda text: 0.9 if "attempt 1" in text else 0.2)
    down = threading.Event()
    down.set()

    def respond(request):  # the first group's request is answered; then the provider is down until told
        return HttpError(503, "overloaded") if down.is_set() and len(judge_double.requests) > 1 else score(request)

    judge_double.responder = respond
    launcher = user_factory(email="launcher@example.com")
    project = project_factory(owner=launcher)
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    run = run_factory(project=project, steps=1, judge_config=judge, created_by=launcher, agent=agent_factory(
        project=project, environment_options={"judged": True}), rubric_version=rubric_factory(project=project)
        .versions.get())
    run.config["judge"] |= {"transport_retries": 0, "cache": False}  # the outage at once, not after backoffs
    run.save(update_fields=["config"])
    run_enqueue(run=run)

    wait_for(lambda: _run(run).worker == PARKED, timeout=60, message="the run to park for its judge",
             explain=lambda: run_story(run))
    parked = _run(run)
    assert parked.status == RunStatus.PAUSED, parked.error
    assert re.match(r"waiting for the judge: openai/judge answered 503 since \d\d:\d\d; its worker is free",
                    parked.phase), parked.phase
    (scored,) = TrajectoryGroup.objects.filter(run=run)  # the group the judge scored before it went down
    wait_for(lambda: len(judge_double.requests) >= 3, timeout=60, message="the run to ask the judge again",
             explain=lambda: run_story(run))
    assert _run(run).judge_down_since == parked.judge_down_since  # the same outage: asked again on a backoff

    down.clear()  # the provider is back
    wait_for(lambda: _run(run).status == RunStatus.COMPLETED, timeout=60, message="the run to complete",
             explain=lambda: run_story(run))
    done = _run(run)
    assert done.steps_done == 1 and done.judge_down_since is None and done.checkpoints.count() == 1
    groups = {g.index: g.pk for g in TrajectoryGroup.objects.filter(run=run)}
    assert sorted(groups) == [0, 1] and groups[scored.index] == scored.pk  # kept, not scored again
    question = f"Question {scored.scenario_external_id.removeprefix('s')}?"
    assert sum(question in r.prompt_text for r in judge_double.requests) == 1  # its judge call paid once
    assert done.events.filter(kind="judge_unavailable").count() >= 2

    # The launcher is told of the outage once (tests run the locmem mail backend), not at each retry's park.
    wait_idle(timeout=30)
    told = [m for m in mail.outbox if "waits for its judge" in m.subject]
    assert len(told) == 1 and "answered 503" in told[0].body, [m.subject for m in mail.outbox]
    assert Notification.objects.filter(run=run, event=NotifyEvent.JUDGE_DOWN).count() == 1
