"""Words a newcomer reads in the first hour (issue 48, item 8): messages built from a status or role take "an"
before a vowel, the agent form's budget agrees in number, and the tokens page says a project token also reaches
the served checkpoints. (A stdio program that prints plain text: tests/training/test_mcp_named_faults.py and
tests/webapp/test_user_errors.py.)"""
from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.webapp.factories import (
    TEST_TINY_MODEL, mcp_server_factory, project_factory, run_factory,
)
from webapp.models import RunStatus
from webapp.wording import with_article

pytestmark = pytest.mark.django_db


def test_a_run_awaiting_review_that_cannot_be_resumed_is_called_an_awaiting_review_run(client):
    run = run_factory(status=RunStatus.AWAITING_REVIEW, worker="w")
    client.force_login(run.project.owner)
    response = client.post(reverse("run-control", args=[run.id, "resume"]), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "an awaiting review run cannot be resumed" in body and "a awaiting" not in body


@pytest.mark.parametrize("phrase, expected", [
    ("awaiting review", "an awaiting review"), ("queued", "a queued"), ("accepted", "an accepted"),
    ("editor", "an editor"), ("viewer", "a viewer"), ("Running", "a Running"),
])
def test_a_phrase_built_from_a_value_takes_the_article_its_first_letter_asks_for(phrase, expected):
    assert with_article(phrase) == expected


def test_the_agent_forms_budget_says_the_system_prompt_takes_and_prompt_with_tools_take(client, settings,
                                                                                        tiny_model_dir):
    settings.STUDIO_MODEL_CHECK = "launch"
    project = project_factory()
    client.force_login(project.owner)
    url = reverse("agent-prompt-budget", args=[project.id])
    alone = client.post(url, {"base_model": TEST_TINY_MODEL, "system_prompt": "Answer in one line.",
                              "environment_kind": "chat", "max_tokens": 64}).content.decode()
    assert re.search(r"The system prompt takes \d+ tokens;", alone) and "prompt take " not in alone
    tool = {"type": "function", "function": {"name": "read_mail", "description": "Reads a folder.",
                                             "parameters": {"type": "object", "properties": {}}}}
    server = mcp_server_factory(project=project, tools=[tool], tools_listed_at=timezone.now())
    one_tool = client.post(url, {"base_model": TEST_TINY_MODEL, "system_prompt": "Answer in one line.",
                                 "environment_kind": "mcp", "mcp_server": server.id,
                                 "max_tokens": 64}).content.decode()
    assert re.search(r"The system prompt and 1 tool take \d+ tokens;", one_tool)


def test_the_tokens_page_says_a_project_token_asks_the_served_checkpoints_and_where(client):
    project = project_factory()
    client.force_login(project.owner)
    html = client.get(reverse("project-tokens", args=[project.id])).content.decode()
    uses = re.search(r'<ul id="token-uses">(.*?)</ul>', html, re.S)
    assert uses and "Served checkpoints" in uses.group(1) and "External rollouts" in uses.group(1)
    assert f"http://testserver/api/projects/{project.id}/openai/v1/</code>" in uses.group(1)
    assert "&lt;run&gt;@&lt;step&gt;" in uses.group(1)
