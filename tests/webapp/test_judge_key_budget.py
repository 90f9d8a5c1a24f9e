"""A judge key's shared budget in the web app (issue 49; webapp/judge_budget.py): the engine of a run whose key has
one is given it, a run waiting for it says so in its phase and goes on when a slot frees, the playground's
re-scoring keeps to it, and a limit for a key no judge may name stops the start."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from judging import ConcurrencyLimit
from studio.key_budget import BUDGET_ENV, BudgetSpec, KeyLimit
from tests.judge_double import JudgeDouble
from tests.webapp.conftest import run_story, wait_for
from tests.webapp.factories import agent_factory, judge_factory, project_factory, rubric_factory, run_factory
from tests.webapp.test_review import _group
from training.events import JudgeBudgetWait
from webapp.execution.executors import wait_idle
from webapp.execution.runner import engine_env
from webapp.judge_budget import judge_key_budget
from webapp.live.ingest import run_event_ingest
from webapp.models import Rescore, Run, RunStatus
from webapp.services.runs import run_enqueue

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_only_the_engine_of_a_run_whose_key_has_a_budget_is_given_it(settings):
    settings.STUDIO_JUDGE_KEY_LIMITS = {"OPENAI_API_KEY": KeyLimit(concurrency=8, per_minute=600)}

    limited = engine_env(Run(config={"judge": {"api_key_env": "OPENAI_API_KEY"}}))
    other = engine_env(Run(config={"judge": {"api_key_env": "GROQ_API_KEY"}}))

    spec = BudgetSpec.model_validate_json(limited[BUDGET_ENV])
    assert spec.limits == {"OPENAI_API_KEY": KeyLimit(concurrency=8, per_minute=600)}
    assert spec.store == settings.STUDIO_JUDGE_BUDGET_REDIS_URL  # the deployment's Redis: runs on every worker
    assert BUDGET_ENV not in other  # nor the Redis address with it


@pytest.mark.django_db
def test_a_wait_for_the_keys_shared_budget_is_the_runs_phase():
    run = run_factory(status=RunStatus.RUNNING)

    run_event_ingest(run_id=run.id, event=JudgeBudgetWait(key="OPENAI_API_KEY", what="concurrency", limit=8).to_dict())
    assert Run.objects.get(pk=run.pk).phase == "waiting for OPENAI_API_KEY's shared judge budget (8 in flight)"
    run_event_ingest(run_id=run.id, event=JudgeBudgetWait(key="OPENAI_API_KEY", what="rate", limit=600).to_dict())
    assert Run.objects.get(pk=run.pk).phase == "waiting for OPENAI_API_KEY's shared judge budget (600 a minute)"


@pytest.mark.django_db(transaction=True)
def test_the_playgrounds_rescoring_keeps_to_its_keys_shared_budget(judge_double: JudgeDouble, inprocess_executor,
                                                                   monkeypatch, settings):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    settings.STUDIO_JUDGE_KEY_LIMITS = {"JUDGE_DOUBLE_API_KEY": KeyLimit(concurrency=1)}
    run = run_factory(status=RunStatus.COMPLETED)
    judge = judge_factory(project=run.project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY", concurrency=4)
    rubric = rubric_factory(project=run.project, text="Prefer short answers.")
    groups = [_group(run, step=step, scores=[0.2, 0.8], answers=[f"long answer {step}", f"short {step}"])[0].group_id
              for step in (1, 2, 3)]
    judge_double.responder, judge_double.latency_s = JudgeDouble.score_by(lambda text: 0.5), 0.2
    api = APIClient()
    api.force_authenticate(run.project.owner)

    created = api.post("/api/playground/", {"project": run.project_id, "group_ids": groups, "judge_config": judge.id,
                                            "base_version": rubric.latest_version.id, "rubric_text": "Prefer brevity."},
                       format="json")
    assert created.status_code == 201, created.json()
    wait_idle(timeout=60)

    assert Rescore.objects.get(pk=created.json()["id"]).status == "done"
    assert len(judge_double.requests) == 3
    assert judge_double.max_in_flight == 1  # the key's budget, though the judge itself would send 4 at once


@pytest.mark.django_db(transaction=True)
def test_a_run_waiting_for_its_keys_shared_budget_says_so_then_goes_on(inprocess_executor, scripted_engine,
                                                                      judge_double: JudgeDouble, monkeypatch,
                                                                      settings):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    settings.STUDIO_JUDGE_KEY_LIMITS = {"JUDGE_DOUBLE_API_KEY": KeyLimit(concurrency=1)}
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.5)
    held, done = threading.Event(), threading.Event()

    async def hold() -> None:  # another user of the key (a run, a re-scoring) has its one slot
        async with judge_key_budget().limiter("JUDGE_DOUBLE_API_KEY", own=ConcurrencyLimit(1)):
            held.set()
            await asyncio.to_thread(done.wait, 60)

    holder = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    holder.start()
    assert held.wait(10)
    project = project_factory()
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    run = run_factory(project=project, steps=1, judge_config=judge, agent=agent_factory(
        project=project, environment_options={"judged": True}), rubric_version=rubric_factory(project=project)
        .versions.get())
    try:
        run_enqueue(run=run)
        wait_for(lambda: Run.objects.get(pk=run.pk).phase.startswith("waiting for JUDGE_DOUBLE_API_KEY"),
                 timeout=60, message="the run to wait for its key's budget", explain=lambda: run_story(run))
        phase = Run.objects.get(pk=run.pk).phase
        assert phase == "waiting for JUDGE_DOUBLE_API_KEY's shared judge budget (1 in flight)"
        assert judge_double.requests == []  # nothing sent past the budget
    finally:
        done.set()
        holder.join(10)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED, timeout=60,
             message="the run to complete", explain=lambda: run_story(run))
    assert len(judge_double.requests) == 2 and judge_double.max_in_flight == 1


def test_a_limit_for_a_key_no_judge_may_name_stops_the_start():
    env = {**os.environ, "STUDIO_JUDGE_KEY_ENDPOINTS": json.dumps({"OPENAI_API_KEY": [""]}), "JUDGE_API_KEY_ENV": "",
           "STUDIO_JUDGE_KEY_LIMITS": json.dumps({"GROQ_API_KEY": {"concurrency": 2}})}
    result = subprocess.run([sys.executable, "-c", "import webapp.settings"], env=env, capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode != 0
    assert "ImproperlyConfigured: STUDIO_JUDGE_KEY_LIMITS limits GROQ_API_KEY, which no judge may name" in result.stderr
