"""New agent from an example (issue 38): the example's agent and its generated scenario set, held-out ones in the
validation split; bad input changes nothing; only editors of the project may."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.factories import member_factory, project_factory, user_factory
from webapp.models import Agent, Role, Scenario, ScenarioSet

pytestmark = pytest.mark.django_db


def test_an_editor_creates_the_codenames_agent_with_its_boards_and_held_out_boards(client, settings):
    settings.STUDIO_HF_MODELS = ["Qwen/*"]  # the deployment allows the Hugging Face id named below
    project = project_factory()
    client.force_login(project.owner)
    data = {"example": "codenames", "base_model": "Qwen/Qwen2.5-0.5B-Instruct", "scenarios": 6, "held_out": 2}
    assert client.post(reverse("agent-from-example", args=[project.id]), data).status_code == 302
    agent = Agent.objects.get(project=project)
    assert agent.environment_kind == "codenames" and agent.environment_options["play"] == "both"
    scenarios = Scenario.objects.filter(scenario_set__project=project)
    assert scenarios.filter(split=Scenario.Split.TRAIN).count() == 6
    assert scenarios.filter(split=Scenario.Split.VALIDATION).count() == 2
    assert all("seed" in s.metadata for s in scenarios)
    client.post(reverse("agent-from-example", args=[project.id]), data)  # again: a second, distinctly named pair
    assert sorted(Agent.objects.filter(project=project).values_list("name", flat=True)) == [
        "Codenames: spymaster and guesser", "Codenames: spymaster and guesser (2)"]
    page = client.get(reverse("project-detail", args=[project.id])).content.decode()
    assert reverse("agent-from-example", args=[project.id]) in page


def test_an_unknown_example_or_too_many_scenarios_is_refused_and_creates_nothing(client):
    project = project_factory()
    client.force_login(project.owner)
    url = reverse("agent-from-example", args=[project.id])
    bad = client.post(url, {"example": "chess", "base_model": "tiny-2048", "scenarios": 5, "held_out": 0})
    assert bad.status_code == 400 and "chess" in bad.content.decode()
    assert client.post(url, {"example": "temporal_clue", "base_model": "tiny-2048", "scenarios": 401,
                             "held_out": 0}).status_code == 400
    assert not Agent.objects.filter(project=project).exists() and not ScenarioSet.objects.filter(project=project)


def test_a_viewer_or_an_outsider_cannot_create_an_example_agent_in_someone_elses_project(client):
    project = project_factory()
    viewer = member_factory(project=project, role=Role.VIEWER)
    outsider = user_factory()
    project_factory(owner=outsider)  # an ordinary account with a project of its own
    data = {"example": "tictactoe-self", "base_model": "tiny-2048", "scenarios": 3, "held_out": 0}
    client.force_login(viewer)
    assert client.post(reverse("agent-from-example", args=[project.id]), data).status_code == 403
    client.force_login(outsider)
    assert client.post(reverse("agent-from-example", args=[project.id]), data).status_code == 404
    assert not Agent.objects.filter(project=project).exists()


def test_an_example_agent_gets_its_warmed_up_model_where_the_deployment_offers_it(client, settings):
    from tests.webapp.factories import catalogue_model
    from training.fixtures.examples import GAMES_MODEL

    project = project_factory()
    client.force_login(project.owner)
    url = reverse("agent-from-example", args=[project.id])
    form = client.get(url).content.decode()
    assert '<option value="" selected>the example&#x27;s own model</option>' in form
    # This deployment removed the games model and offers two others: a person must choose, and is told why.
    settings.STUDIO_BASE_MODELS = {k: v for k, v in settings.STUDIO_BASE_MODELS.items() if k != GAMES_MODEL}
    refused = client.post(url, {"example": "tictactoe-random", "base_model": "", "scenarios": 3, "held_out": 1})
    assert refused.status_code == 400 and "warmed-up model" in refused.content.decode()
    catalogue_model(settings, "/models/tiny-games", name=GAMES_MODEL)  # an administrator lists it
    assert client.post(url, {"example": "tictactoe-random", "base_model": "", "scenarios": 3,
                             "held_out": 1}).status_code == 302
    assert Agent.objects.get(project=project).base_model == GAMES_MODEL
    # A model the person chose is kept.
    client.post(url, {"example": "temporal_clue", "base_model": "tiny-2048", "scenarios": 3, "held_out": 1})
    assert Agent.objects.get(project=project, environment_kind="temporal_clue").base_model == "tiny-2048"


def test_an_example_always_holds_scenarios_out_for_the_evaluation(client):
    project = project_factory()
    client.force_login(project.owner)
    none_held = client.post(reverse("agent-from-example", args=[project.id]),
                            {"example": "temporal_clue", "base_model": "tiny-2048", "scenarios": 3, "held_out": 0})
    assert none_held.status_code == 400 and not Agent.objects.filter(project=project).exists()


def test_after_creating_an_example_agent_the_launch_form_has_it_and_no_judge_or_rubric_chosen(client):
    from tests.webapp.factories import agent_factory, judge_factory, rubric_factory

    project = project_factory()
    rubric, judge = rubric_factory(project=project), judge_factory(project=project)  # the project's only ones
    client.force_login(project.owner)
    created = client.post(reverse("agent-from-example", args=[project.id]),
                          {"example": "codenames", "base_model": "tiny-2048", "scenarios": 3, "held_out": 1})
    agent = Agent.objects.get(project=project)
    scenario_set = ScenarioSet.objects.get(project=project)
    assert created.url == (f"{reverse('run-launch', args=[project.id])}?agent={agent.id}"
                           f"&scenario_set={scenario_set.id}&example=codenames")
    launch = client.get(created.url).content.decode()
    assert f'<option value="{agent.id}" selected>' in launch
    assert f'<option value="{scenario_set.id}" selected>' in launch
    assert f'<option value="{rubric.id}" selected>' not in launch and f'<option value="{judge.id}" selected>' not in launch
    # An agent that needs a judge (chat) still gets the project's only rubric and judge chosen.
    chat = agent_factory(project=project, environment_kind="chat")
    page = client.get(f"{reverse('run-launch', args=[project.id])}?agent={chat.id}").content.decode()
    assert f'<option value="{rubric.id}" selected>' in page and f'<option value="{judge.id}" selected>' in page
