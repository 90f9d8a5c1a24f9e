"""Issue 43, part 1, as the attacker does it: an ordinary account creates its own project and names, as its
agent's base model, a directory of the workers (/etc, another project's merged export), a relative or home path,
a file URL, or a Hugging Face id the deployment does not allow, through the form and through the API. Each is
refused naming base_model and nothing is stored. An agent saved with a path before the model catalogue existed
can be neither launched nor tried: the refusal says to choose a model, and no server or engine ever gets the path.
Beside them, what a member may do: choose the deployment's models from a list (the tiny model with its context
length), name an allowed Hugging Face id, and launch a run that freezes the resolved model."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.urls import reverse

from tests.security.overrides_helpers import api_as, attacker_signs_up, page_as
from tests.webapp.factories import TEST_TINY_MODEL, agent_factory, project_factory
from webapp.model_catalogue import TINY_MODEL, ModelEntry
from webapp.models import Agent, ProjectServer, Run, TrySession

pytestmark = pytest.mark.django_db
AGENT_FORM = {"environment_kind": "chat", "temperature": 1.0, "top_p": 1.0, "max_tokens": 64,
              "system_prompt": "Answer briefly."}


@pytest.fixture
def export_of_another_project(tmp_path) -> Path:
    """Another project's merged export on the workers: a real model-shaped directory."""
    victim = project_factory()
    directory = tmp_path / "exports" / f"project-{victim.id}" / "merged"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "qwen2", "secret": "victim's fine-tune"}))
    return directory


def _attacks(export: Path) -> list[str]:
    return ["/etc", str(export), "../x", "file:///etc/passwd", "~/x", "someorg/not-allowed"]


def test_the_api_refuses_every_path_and_unallowed_id_naming_base_model(settings, export_of_another_project):
    settings.STUDIO_HF_MODELS = ["Qwen/*"]
    attacker = attacker_signs_up()
    api = api_as(attacker.user)
    before = set(Agent.objects.values_list("pk", flat=True))
    for value in _attacks(export_of_another_project):
        response = api.post("/api/agents/", {"project": attacker.project.id, "name": f"mine {value}",
                                             "base_model": value, "environment_kind": "chat"}, format="json")
        assert response.status_code == 400, (value, response.content)
        assert "choose a model" in " ".join(response.json()["base_model"]), value
    assert set(Agent.objects.values_list("pk", flat=True)) == before
    # Nor by editing an agent it has: the stored model stays the catalogue's.
    agent = Agent.objects.get(pk=attacker.agent_id)
    response = api.patch(f"/api/agents/{agent.id}/", {"base_model": str(export_of_another_project)}, format="json")
    assert response.status_code == 400 and "base_model" in response.json()
    agent.refresh_from_db()
    assert agent.base_model == TINY_MODEL


def test_the_form_refuses_every_path_and_unallowed_id_naming_base_model(settings, export_of_another_project):
    settings.STUDIO_HF_MODELS = ["Qwen/*"]
    attacker = attacker_signs_up()
    page = page_as(attacker.user)
    url = reverse("agent-create", args=[attacker.project.id])
    for value in _attacks(export_of_another_project):
        for field in ("base_model", "base_model_id"):  # the list, and the Hugging Face id entry beside it
            response = page.post(url, {"name": "mine", field: value, **AGENT_FORM})
            assert response.status_code == 400, (value, field)
            html = response.content.decode()
            assert f'id="err-{field}"' in html and "choose a model" in html, (value, field)
    assert not Agent.objects.filter(project=attacker.project, name="mine").exists()
    examples = page.post(reverse("agent-from-example", args=[attacker.project.id]),
                         {"example": "codenames", "base_model": "/etc", "scenarios": 3, "held_out": 0})
    assert examples.status_code == 400 and "choose a model" in examples.content.decode()
    assert list(Agent.objects.filter(project=attacker.project).values_list("pk", flat=True)) == [attacker.agent_id]


def test_an_agent_saved_with_a_path_before_the_catalogue_is_neither_launched_nor_tried(
        settings, export_of_another_project):
    settings.STUDIO_MODEL_CHECK = "launch"  # the launch would read a model's config.json: it must not get this one
    attacker = attacker_signs_up()
    legacy = agent_factory(project=attacker.project, base_model=str(export_of_another_project))
    attacker.agent_id = legacy.id
    for response in (attacker.api_launch({}), attacker.form_launch({})):
        assert response.status_code == 400
        text = response.content.decode()
        assert "choose a model" in text and "config.json" not in text
    assert not Run.objects.filter(project=attacker.project).exists()

    page = page_as(attacker.user)
    response = page.post(reverse("try-page", args=[attacker.project.id]),
                         {"agent": legacy.id, "include_base": "on", "message": "What do you know?"})
    assert response.status_code == 400 and "choose a model" in response.content.decode()
    assert not TrySession.objects.filter(project=attacker.project).exists()
    assert not ProjectServer.objects.filter(base_model=str(export_of_another_project)).exists()
    # The agent's page says what to do.
    edit = page.get(reverse("agent-edit", args=[legacy.id])).content.decode()
    assert "choose a model" in edit


def test_the_dropdown_lists_the_tiny_model_with_its_context_length_and_no_id_entry_by_default(settings):
    settings.STUDIO_HF_MODELS = []
    attacker = attacker_signs_up()
    html = page_as(attacker.user).get(reverse("agent-create", args=[attacker.project.id])).content.decode()
    assert f'<option value="{TINY_MODEL}"' in html and "1024 tokens of context" in html
    assert 'name="base_model_id"' not in html
    example = page_as(attacker.user).get(reverse("agent-from-example", args=[attacker.project.id])).content.decode()
    # the example form starts on the example's own model (its warmed-up one where offered: services/examples.py)
    assert '<option value="" selected>the example&#x27;s own model</option>' in example


def test_a_deployment_offering_one_model_has_it_chosen_in_the_agent_form_and_two_leave_the_choice(settings):
    attacker = attacker_signs_up()
    url = reverse("agent-create", args=[attacker.project.id])
    settings.STUDIO_BASE_MODELS = {TINY_MODEL: settings.STUDIO_BASE_MODELS[TINY_MODEL]}  # the demo's one model
    assert f'<option value="{TINY_MODEL}" selected' in page_as(attacker.user).get(url).content.decode()
    settings.STUDIO_BASE_MODELS = {**settings.STUDIO_BASE_MODELS, "other": ModelEntry(
        source="Qwen/Qwen2.5-0.5B-Instruct", context_length=32768)}
    html = page_as(attacker.user).get(url).content.decode()
    assert f'<option value="{TINY_MODEL}" selected' not in html


def test_an_allowed_hugging_face_id_is_accepted_by_the_form_and_the_api(settings):
    settings.STUDIO_HF_MODELS = ["Qwen/*"]
    attacker = attacker_signs_up()
    page = page_as(attacker.user)
    assert 'name="base_model_id"' in page.get(reverse("agent-create", args=[attacker.project.id])).content.decode()
    response = page.post(reverse("agent-create", args=[attacker.project.id]),
                         {"name": "qwen", "base_model_id": "Qwen/Qwen2.5-0.5B-Instruct", **AGENT_FORM})
    assert response.status_code == 302
    assert Agent.objects.get(project=attacker.project, name="qwen").base_model == "Qwen/Qwen2.5-0.5B-Instruct"
    response = api_as(attacker.user).post("/api/agents/", {
        "project": attacker.project.id, "name": "qwen api", "base_model": "Qwen/Qwen3-0.6B",
        "environment_kind": "chat"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["base_model"] == "Qwen/Qwen3-0.6B"


def test_a_run_freezes_the_resolved_source_and_the_name(settings, tmp_path):
    source = tmp_path / "models" / "small"
    settings.STUDIO_BASE_MODELS = {**settings.STUDIO_BASE_MODELS,
                                   "small": ModelEntry(source=str(source), context_length=2048, description="small")}
    attacker = attacker_signs_up()
    api = api_as(attacker.user)
    assert api.patch(f"/api/agents/{attacker.agent_id}/", {"base_model": "small"}, format="json").status_code == 200
    response = attacker.api_launch({})
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.config["base_model"] == str(source) and run.config["base_model_name"] == "small"
    page = page_as(attacker.user).get(reverse("run-detail", args=[run.id])).content.decode()
    assert 'id="run-model">small<' in page


def test_the_agent_forms_token_count_reads_no_directory_it_is_sent(settings, tmp_path, tiny_model_dir):
    settings.STUDIO_MODEL_CHECK = "launch"  # the count loads the model's tokenizer in the web process
    elsewhere = tmp_path / "another-projects-export"
    shutil.copytree(tiny_model_dir, elsewhere)  # a loadable model, but not one of the deployment's
    attacker = attacker_signs_up()
    url = reverse("agent-prompt-budget", args=[attacker.project.id])
    form = {"system_prompt": "Hi.", "environment_kind": "chat", "max_tokens": 16}
    for field in ("base_model", "base_model_id"):
        html = page_as(attacker.user).post(url, {**form, field: str(elsewhere)}).content.decode()
        assert "choose a model" in html and "data-fits" not in html, field
    counted = page_as(attacker.user).post(url, {**form, "base_model": TEST_TINY_MODEL}).content.decode()
    assert 'data-fits="1"' in counted  # the deployment's own model is counted
