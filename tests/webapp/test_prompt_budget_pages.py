"""A launch whose prompt (system prompt, the tools as the chat template renders them, the longest scenario) plus
max_tokens is more than the model's context is refused beside the agent, in words with the numbers; the agent
form counts the same numbers as soon as they are known (htmx), before anything is launched."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.built_models import tiny_model_path
from tests.webapp.factories import (
    TEST_TINY_MODEL, agent_factory, mcp_server_factory, project_factory, scenario_set_factory,
)
from webapp.models import Run

pytestmark = pytest.mark.django_db
SYSTEM = "You read the user's mailbox with the tools and answer in one line."


def mail_tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {"name": f"mail_tool_{i}", "description": "Reads a mail folder " * 8,
                                              "parameters": {"type": "object", "properties": {}}}}
            for i in range(n)]


@pytest.fixture
def model_check(settings):
    settings.STUDIO_MODEL_CHECK = "launch"


def _mcp_agent(project, model, *, tools, max_tokens=256):
    server = mcp_server_factory(project=project, tools=tools, tools_listed_at=timezone.now())
    assert model == tiny_model_path()  # built, and listed in the tests' catalogue as TEST_TINY_MODEL
    return agent_factory(project=project, base_model=TEST_TINY_MODEL, system_prompt=SYSTEM, environment_kind="mcp",
                         environment_options={"mcp_server": server.id, "reward": "reference"},
                         max_tokens=max_tokens)


def _launch(client, project, agent):
    return client.post(reverse("run-launch", args=[project.id]), {
        "name": "mail run", "agent": agent.id, "scenario_set": scenario_set_factory(project=project).id,
        "steps": 2, "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0})


def _agent_errors(html: str) -> str:
    found = re.search(r'<div class="field-errors" id="err-agent"[^>]*>(.*?)</div>', html, re.S)
    assert found, "no error container for agent"
    return found.group(1)


def test_an_mcp_agent_whose_tools_and_answer_pass_the_context_is_not_launched(client, model_check, tiny_model_dir):
    from rest_framework.test import APIClient

    project = project_factory()
    client.force_login(project.owner)
    agent = _mcp_agent(project, tiny_model_dir, tools=mail_tools(4))
    api = APIClient()
    api.force_authenticate(project.owner)
    refused = api.post("/api/runs/", {"project": project.id, "name": "r", "agent": agent.id, "steps": 1,
                                      "scenario_set": scenario_set_factory(project=project).id}, format="json")
    assert refused.status_code == 400
    assert "the prompt does not fit the model" in " ".join(refused.json()["agent"])
    response = _launch(client, project, agent)
    assert response.status_code == 400
    errors = _agent_errors(response.content.decode())
    assert "the prompt does not fit the model: it is" in errors and "(the system prompt, its 4 tools and" in errors
    assert "plus max tokens 256" in errors and "the model&#x27;s context of 1024 tokens" in errors
    assert "lower the agent&#x27;s max tokens to at most" in errors
    assert Run.objects.count() == 0


def test_the_same_agent_with_room_for_its_answers_launches(client, model_check, tiny_model_dir):
    project = project_factory()
    client.force_login(project.owner)
    response = _launch(client, project, _mcp_agent(project, tiny_model_dir, tools=mail_tools(2), max_tokens=96))
    assert response.status_code == 302 and Run.objects.count() == 1


def test_the_agent_form_shows_the_prompts_share_of_the_context_and_warns_when_it_cannot_fit(
        client, model_check, tiny_model_dir):
    project = project_factory()
    scenario_set_factory(project=project, name="mail tasks")
    server = mcp_server_factory(project=project, tools=mail_tools(4), tools_listed_at=timezone.now())
    client.force_login(project.owner)
    form = {"base_model": TEST_TINY_MODEL, "system_prompt": SYSTEM, "environment_kind": "mcp",
            "mcp_server": server.id, "max_tokens": 256}
    url = reverse("agent-prompt-budget", args=[project.id])
    too_long = client.post(url, form).content.decode()
    assert 'data-fits="0"' in too_long and "This agent cannot answer: the prompt does not fit the model" in too_long
    assert re.search(r"take \d+ tokens; with max tokens 256, \d+ of the model's 1024-token context", too_long)
    assert "mail tasks: longest scenario" in too_long and "a run on it would be refused" in too_long
    fits = client.post(url, {**form, "max_tokens": 64}).content.decode()
    assert 'data-fits="1"' in fits and "cannot answer" not in fits and "— fits" in fits
    unknown = client.post(url, {**form, "base_model": ""}).content.decode()
    assert "once the base model and max tokens are filled in" in unknown


def test_an_mcp_server_never_listed_is_said_to_be_uncounted(client, model_check, tiny_model_dir):
    project = project_factory()
    server = mcp_server_factory(project=project)
    client.force_login(project.owner)
    html = client.post(reverse("agent-prompt-budget", args=[project.id]), {
        "base_model": TEST_TINY_MODEL, "system_prompt": SYSTEM, "environment_kind": "mcp",
        "mcp_server": server.id, "max_tokens": 64}).content.decode()
    assert "tools are not counted: use Test connection" in html


def test_another_projects_mcp_server_is_not_read(client, model_check, tiny_model_dir):
    # An editor of their own project names someone else's server id: its tools are neither counted nor shown.
    victim = mcp_server_factory(project=project_factory(), tools=mail_tools(4), tools_listed_at=timezone.now())
    attacker = project_factory()
    client.force_login(attacker.owner)
    html = client.post(reverse("agent-prompt-budget", args=[attacker.id]), {
        "base_model": TEST_TINY_MODEL, "system_prompt": SYSTEM, "environment_kind": "mcp",
        "mcp_server": victim.id, "max_tokens": 64}).content.decode()
    assert "4 tools" not in html and "tools are not counted" in html


def test_the_agent_form_asks_for_the_count_as_soon_as_it_loads_and_on_each_change(client, model_check):
    project = project_factory()
    client.force_login(project.owner)
    html = client.get(reverse("agent-create", args=[project.id])).content.decode()
    box = re.search(r'<div id="prompt-budget"[^>]*>', html, re.S).group(0)
    assert reverse("agent-prompt-budget", args=[project.id]) in box
    assert "load" in box and "change from:#page-form" in box
