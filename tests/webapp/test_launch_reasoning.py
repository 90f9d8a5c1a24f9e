"""The launch page lets a person keep or drop a reasoning model's thinking (Qwen3, issue 45): the choice is offered
for agents on a Qwen3-family catalogue model only, refused with the reason for any other, frozen into the run's
`chat` and shown on the run page."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import TEST_TINY_MODEL, agent_factory, project_factory, scenario_set_factory
from webapp.model_catalogue import ModelEntry
from webapp.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def editor(client, settings):
    settings.STUDIO_BASE_MODELS = {**settings.STUDIO_BASE_MODELS, "my-qwen3": ModelEntry(
        source="Qwen/Qwen3-8B", context_length=32768, chat_template="qwen3")}
    project = project_factory()
    client.force_login(project.owner)
    client.project = project
    client.tiny = agent_factory(project=project, name="tiny agent", base_model=TEST_TINY_MODEL,
                                environment_options={"exact_match": True})
    return client


def qwen3_agent(client):
    return agent_factory(project=client.project, name="qwen agent", base_model="my-qwen3",
                         environment_options={"exact_match": True})


def launch(client, agent, **extra):
    return client.post(reverse("run-launch", args=[client.project.id]), {
        "name": "r", "agent": agent.id, "scenario_set": scenario_set_factory(project=client.project).id, "steps": 2,
        "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0, **extra})


def test_a_run_of_a_qwen3_agent_drops_reasoning_when_asked_and_its_page_says_so(editor):
    before = editor.get(reverse("run-launch", args=[editor.project.id])).content.decode()
    assert 'name="reasoning"' not in before  # no agent on a reasoning model yet: nothing to choose
    agent = qwen3_agent(editor)
    html = editor.get(reverse("run-launch", args=[editor.project.id])).content.decode()
    [offered] = re.findall(r'<select name="reasoning"[^>]*data-agents="([^"]*)"', html)
    assert offered == str(agent.id)  # the tiny agent's model does not reason: not offered for it
    response = launch(editor, agent, reasoning="drop")
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert run.config["chat"] == {"family": "qwen3", "reasoning": "drop"}
    page = editor.get(reverse("run-detail", args=[run.id])).content.decode()
    assert "qwen3; reasoning drop" in page


def test_dropping_reasoning_for_a_model_that_has_none_is_refused_with_the_reason(editor):
    qwen3_agent(editor)  # the field is on the page, for the other agent
    response = launch(editor, editor.tiny, reasoning="drop")
    assert response.status_code == 400
    assert f"tiny agent&#x27;s base model, {TEST_TINY_MODEL}, is not a Qwen3-family model: it has no reasoning " \
           "to drop" in response.content.decode()
    assert not Run.objects.exists()


def test_the_advanced_json_cannot_drop_the_reasoning_of_a_model_that_has_none(editor):
    response = launch(editor, editor.tiny, overrides='{"chat": {"reasoning": "drop"}}')
    assert response.status_code == 400
    assert "is not a Qwen3-family model" in response.content.decode()
    assert not Run.objects.exists()
    assert launch(editor, editor.tiny, overrides='{"chat": {"reasoning": "keep"}}').status_code == 302
