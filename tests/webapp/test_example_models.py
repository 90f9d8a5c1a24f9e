"""The examples' own models in the deployment's list (issue 46): the games' warmed-up tiny model is a default entry,
the game examples take it when no model is chosen (never the 2048 model, on which they cannot learn), and until it
is built the example form and the launch say which command builds it."""
from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from tests.webapp.factories import catalogue_model, project_factory
from webapp.model_catalogue import GAMES_MODEL, TINY_MODEL
from webapp.models import Agent, Run, ScenarioSet

pytestmark = pytest.mark.django_db
BUILDS_IT = "`python -m training.fixtures.tiny_games_model` builds it"


@pytest.mark.parametrize("example, model", [("tictactoe-random", GAMES_MODEL), ("tictactoe-self", GAMES_MODEL),
                                            ("codenames", GAMES_MODEL), ("temporal_clue", GAMES_MODEL),
                                            ("game_2048", TINY_MODEL)])
def test_an_example_left_on_its_own_model_gets_the_model_warmed_up_for_it(client, example, model):
    project = project_factory()
    client.force_login(project.owner)
    created = client.post(reverse("agent-from-example", args=[project.id]),
                          {"example": example, "base_model": "", "scenarios": 3, "held_out": 1})
    assert created.status_code == 302
    assert Agent.objects.get(project=project).base_model == model


def test_the_example_form_says_how_to_build_the_games_model_until_it_is_built(client, settings, tmp_path):
    project = project_factory()
    client.force_login(project.owner)
    url = reverse("agent-from-example", args=[project.id])
    catalogue_model(settings, tmp_path / "tiny-games-model", name=GAMES_MODEL)  # listed, not built
    note = re.search(r'<p class="note">(.*?)</p>', client.get(url).content.decode(), re.S).group(1)
    assert f"{GAMES_MODEL} is not built yet: {BUILDS_IT}" in note
    for title in ("Tic Tac Toe against a random player", "Codenames: spymaster and guesser", "Temporal Clue"):
        assert title in note
    assert str(tmp_path) not in note  # named, never the workers' path
    (tmp_path / "tiny-games-model").mkdir()  # built
    assert f"{GAMES_MODEL} is not built yet" not in client.get(url).content.decode()


def test_a_game_examples_run_on_the_games_model_not_built_yet_is_refused_saying_how_to_build_it(client, settings,
                                                                                               tmp_path):
    settings.STUDIO_MODEL_CHECK = "launch"
    catalogue_model(settings, tmp_path / "tiny-games-model", name=GAMES_MODEL)
    project = project_factory()
    client.force_login(project.owner)
    created = client.post(reverse("agent-from-example", args=[project.id]),
                          {"example": "tictactoe-random", "base_model": "", "scenarios": 3, "held_out": 1})
    agent, scenario_set = Agent.objects.get(project=project), ScenarioSet.objects.get(project=project)
    launch = client.post(created.url, {"name": "r", "agent": agent.id, "scenario_set": scenario_set.id, "steps": 2,
                                       "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0})
    assert launch.status_code == 400 and not Run.objects.exists()
    said = launch.content.decode()
    said = re.search(r'<div class="field-errors" id="err-agent"[^>]*>(.*?)</div>', said, re.S).group(1)
    assert f"base model {GAMES_MODEL}: no such directory on this machine" in said and BUILDS_IT in said
    assert str(tmp_path) not in said


@pytest.mark.parametrize("example", ["tictactoe-random", "game_2048"])
def test_the_launch_form_after_an_example_opens_on_the_settings_it_learns_with(client, example):
    from training.fixtures.examples import EXAMPLES
    from webapp.services import run_config as defaults

    project = project_factory()
    client.force_login(project.owner)
    created = client.post(reverse("agent-from-example", args=[project.id]),
                          {"example": example, "base_model": "", "scenarios": 3, "held_out": 1})
    recipe = EXAMPLES[example].recipe
    form = client.get(created.url).context["form"]
    for field in ("steps", "group_size", "groups_per_step", "learning_rate"):
        assert form[field].value() == recipe[field], field
    assert json.loads(form["overrides"].value()) == recipe["overrides"]
    assert recipe["learning_rate"] != defaults.DEFAULT_LEARNING_RATE  # the launch form's own would not move it
    # Not from an example (or a name that is none): the form's own defaults.
    for query in ("", "?example=no-such-example"):
        form = client.get(reverse("run-launch", args=[project.id]) + query).context["form"]
        assert form["learning_rate"].value() == defaults.DEFAULT_LEARNING_RATE and not form["overrides"].value()
