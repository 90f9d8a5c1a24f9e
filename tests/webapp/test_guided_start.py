"""The guided start (issue 48): from the home page of a new account, or an empty project, to a launched run by
clicks only: what a browser sends is the page's own choices (radio buttons already chosen, a hidden token), never
a typed path or JSON. The run is the example's, on the deployment's model, with a scenario set made for it."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import agent_factory, member_factory, project_factory, user_factory
from webapp.models import Agent, Project, Role, Run, Scenario

pytestmark = pytest.mark.django_db


def _clicks(page: str) -> tuple[str, dict[str, str]]:
    """The guided form's action and what a browser sends when Launch is clicked with the choices as they are."""
    form = re.search(r'<form method="post" action="([^"]+)" novalidate id="guided-start-form".*?</form>', page, re.S)
    assert form is not None, "no guided start on the page"
    html = form.group(0)
    assert "<textarea" not in html and not re.search(r'<input type="(text|number|url)"', html)  # nothing to type
    sent = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', html))
    sent.update(re.findall(r'<input type="radio" name="(\w+)" value="([^"]+)"[^>]*\bchecked>', html))
    return form.group(1), sent


def test_a_new_account_goes_from_the_home_page_to_a_launched_run_by_clicks_only(client):
    user = user_factory()
    client.force_login(user)
    home = client.get(reverse("project-list")).content.decode()
    action, sent = _clicks(home)
    # The example warmed up on the deployment's tiny model, and that model, are chosen already.
    assert action == reverse("guided-start") and sent["example"] == "game_2048" and sent["base_model"] == "tiny-2048"
    for sentence in ("1. What should your agent learn?", "2. Which model learns it?", "3. Practice and test",
                     "4. Launch."):
        assert sentence in home
    launched = client.post(action, sent)
    assert launched.status_code == 302
    run = Run.objects.get()
    assert launched["Location"] == reverse("run-detail", args=[run.id])
    assert run.project.owner == user and run.project.name == "2048 moves" and run.status == "queued"
    assert run.agent.environment_kind == "game_2048" and run.agent.base_model == "tiny-2048"
    splits = Scenario.objects.filter(scenario_set=run.scenario_set)
    assert splits.filter(split=Scenario.Split.TRAIN).count() == 32
    assert splits.filter(split=Scenario.Split.VALIDATION).count() == 8  # kept to test it on what it never saw
    assert run.config["grpo"]["learning_rate"] == 2e-3 and run.config["steps"] == 20  # the tiny model's recipe
    assert client.get(launched["Location"]).status_code == 200
    # Back and Launch again (or a double click): the same run, nothing made twice.
    again = client.post(action, sent)
    assert again["Location"] == launched["Location"]
    assert Run.objects.count() == 1 and Project.objects.count() == 1 and Agent.objects.count() == 1
    # Once there is a project, the home page keeps a link to start another, not the whole form.
    assert 'id="guided-start-link"' in client.get(reverse("project-list")).content.decode()


def test_an_empty_project_opens_on_the_guided_start_which_launches_into_that_project(client):
    project = project_factory()
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(project.owner)
    action, sent = _clicks(client.get(reverse("project-detail", args=[project.id])).content.decode())
    assert action == reverse("project-guided-start", args=[project.id])
    launched = client.post(action, {**sent, "example": "tictactoe-random"})  # another example: one more click
    run = Run.objects.get()
    assert launched["Location"] == reverse("run-detail", args=[run.id]) and run.project == project
    assert run.agent.environment_kind == "tictactoe" and run.agent.base_model == "tiny-2048"
    assert 'id="guided-start-form"' not in client.get(reverse("project-detail", args=[project.id])).content.decode()
    client.force_login(viewer)  # launching is an editor's
    assert client.post(action, sent).status_code == 403 and Run.objects.count() == 1


def test_a_blank_agent_opens_the_agent_form_and_a_project_with_agents_shows_no_guided_start(client):
    project = project_factory()
    client.force_login(project.owner)
    action, sent = _clicks(client.get(reverse("project-detail", args=[project.id])).content.decode())
    chosen = client.post(action, {**sent, "example": "blank"})
    assert chosen["Location"] == reverse("agent-create", args=[project.id]) and not Run.objects.exists()
    agent_factory(project=project)
    assert 'id="guided-start-form"' not in client.get(reverse("project-detail", args=[project.id])).content.decode()
