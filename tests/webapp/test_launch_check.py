"""Checks before launch: the base model exists, loads and fits; the judge's key variable is set where the runs
execute. Errors sit beside the field on the form (no traceback) and come back as a 400 from the API."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from studio.key_policy import parse_key_policy
from tests.webapp.factories import (
    TEST_TINY_MODEL, agent_factory, catalogue_model, judge_factory, project_factory, run_factory, scenario_set_factory,
)
from webapp.execution.runner import run_execute
from webapp.models import Run, RunStatus

pytestmark = pytest.mark.django_db
ABSENT_KEY = "STUDIO_TEST_ABSENT_JUDGE_API_KEY"


@pytest.fixture
def model_check(settings):
    settings.STUDIO_MODEL_CHECK = "launch"


@pytest.fixture
def editor(client):
    project = project_factory()
    client.force_login(project.owner)
    client.project = project
    return client


def _form(project, agent, **extra):
    return {"name": "r", "agent": agent.id, "scenario_set": scenario_set_factory(project=project).id, "steps": 2,
            "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0, **extra}


def _field_errors(html: str, field: str) -> str:
    found = re.search(rf'<div class="field-errors" id="err-{field}"[^>]*>(.*?)</div>', html, re.S)
    assert found, f"no error container for {field}"
    return found.group(1)


def test_a_missing_model_directory_is_shown_beside_the_agent_and_launches_nothing(editor, model_check, tmp_path,
                                                                                   settings):
    # the deployment lists a directory that is not on this machine
    agent = agent_factory(project=editor.project, base_model=catalogue_model(settings, tmp_path / "no-such-model"))
    response = editor.post(reverse("run-launch", args=[editor.project.id]), _form(editor.project, agent))
    assert response.status_code == 400
    html = response.content.decode()
    said = _field_errors(html, "agent")
    assert "no such directory on this machine" in said
    assert str(tmp_path) not in said  # named by its catalogue name: a member never sees the worker's path
    assert "Traceback" not in html and Run.objects.count() == 0


def test_the_demos_model_not_built_yet_is_named_and_says_how_to_build_it(editor, model_check, tmp_path, settings):
    from webapp.model_catalogue import TINY_MODEL

    agent = agent_factory(project=editor.project,
                          base_model=catalogue_model(settings, tmp_path / "tiny-model", name=TINY_MODEL))
    response = editor.post(reverse("run-launch", args=[editor.project.id]), _form(editor.project, agent))
    assert response.status_code == 400
    said = _field_errors(response.content.decode(), "agent")
    assert f"base model {TINY_MODEL}: no such directory on this machine" in said and "`make demo` builds it" in said


def test_a_directory_without_config_json_is_refused(editor, model_check, tmp_path, tiny_model_dir, settings):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "config.json").unlink()
    agent = agent_factory(project=editor.project, base_model=catalogue_model(settings, model))
    response = editor.post(reverse("run-launch", args=[editor.project.id]), _form(editor.project, agent))
    assert response.status_code == 400
    assert "no loadable config.json" in _field_errors(response.content.decode(), "agent")
    assert Run.objects.count() == 0


def test_max_tokens_beyond_the_models_context_is_refused_and_within_it_launches(editor, model_check, tiny_model_dir):
    too_long = agent_factory(project=editor.project, base_model=TEST_TINY_MODEL, max_tokens=5000)
    response = editor.post(reverse("run-launch", args=[editor.project.id]), _form(editor.project, too_long))
    assert response.status_code == 400
    assert "sampling.max_tokens 5000 is more than base model" in _field_errors(response.content.decode(), "agent")
    fits = agent_factory(project=editor.project, base_model=TEST_TINY_MODEL, max_tokens=64,
                         environment_options={"exact_match": True})  # a reward of its own: no judge needed
    assert editor.post(reverse("run-launch", args=[editor.project.id]),
                       _form(editor.project, fits, name="fits")).status_code == 302
    assert list(Run.objects.values_list("name", flat=True)) == ["fits"]


def test_the_api_answers_an_uncached_hub_id_with_400_and_the_message(model_check, tmp_path, monkeypatch, settings):
    settings.STUDIO_HF_MODELS = ["someorg/*"]  # allowed by the deployment, but not in this machine's cache
    settings.STUDIO_MODEL_DOWNLOAD = False  # nor fetched by the workers (tests/webapp/test_model_download.py)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    project = project_factory()
    api = APIClient()
    api.force_authenticate(project.owner)
    agent = agent_factory(project=project, base_model="someorg/not-cached-model")
    response = api.post("/api/runs/", {"project": project.id, "name": "r", "agent": agent.id,
                                       "scenario_set": scenario_set_factory(project=project).id, "steps": 2},
                        format="json")
    assert response.status_code == 400
    message = " ".join(response.json()["agent"])
    assert "not-cached-model" in message and "local Hugging Face cache" in message and "workers" in message
    assert Run.objects.count() == 0


def test_the_embedded_executor_needs_the_judges_key_variable_in_its_own_environment(editor, settings, monkeypatch,
                                                                                    judge_double):
    settings.STUDIO_EXECUTOR = "inprocess"
    policy = json.dumps({ABSENT_KEY: [judge_double.api_base]})
    monkeypatch.setenv("STUDIO_JUDGE_KEY_ENDPOINTS", policy)
    settings.STUDIO_JUDGE_KEY_ENDPOINTS = parse_key_policy(policy)
    monkeypatch.delenv(ABSENT_KEY, raising=False)
    judge_double.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                   {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})  # launch's test
    project = editor.project
    judge = judge_factory(project=project, api_key_env=ABSENT_KEY, api_base=judge_double.api_base)
    form = _form(project, agent_factory(project=project), judge_config=judge.id)
    response = editor.post(reverse("run-launch", args=[project.id]), form)
    assert response.status_code == 400
    errors = _field_errors(response.content.decode(), "judge_config")
    assert f"key variable {ABSENT_KEY} is not set in the web app&#x27;s environment" in errors
    assert Run.objects.count() == 0
    monkeypatch.setenv(ABSENT_KEY, "sk-test")
    assert editor.post(reverse("run-launch", args=[project.id]), form).status_code == 302
    assert Run.objects.count() == 1


def test_a_celery_launch_leaves_the_key_to_the_worker_which_fails_the_run_at_once(settings, monkeypatch):
    settings.STUDIO_EXECUTOR = "celery"
    monkeypatch.delenv(ABSENT_KEY, raising=False)
    project = project_factory()
    run = run_factory(project=project, judge_config=judge_factory(project=project, api_key_env=ABSENT_KEY))
    assert run_execute(run_id=run.id, worker="test-worker") == RunStatus.FAILED
    run.refresh_from_db()
    assert run.error == (f"the judge's key variable {ABSENT_KEY} is not set on this worker; set it in the worker's "
                         "environment and restart it, or store the key on the judge")


def test_the_worker_checks_the_model_before_starting_the_engine(settings, tmp_path):
    settings.STUDIO_MODEL_CHECK = "worker"
    project = project_factory()  # the agent's model went away after the launch (the base model is the agent's)
    model = catalogue_model(settings, tmp_path / "deleted-model")
    run = run_factory(project=project, agent=agent_factory(project=project, base_model=model))
    assert run_execute(run_id=run.id, worker="test-worker") == RunStatus.FAILED
    run.refresh_from_db()
    assert run.error.startswith(f"base model {tmp_path / 'deleted-model'}: no such directory")
    assert not (Path(run.output_dir) / "engine.log").exists()  # no engine was started
