"""The smaller defects a new user met (issue 18, item 12): each test failed before its fix."""
from __future__ import annotations

import re

import pytest

from tests.webapp.factories import project_factory, run_factory, scenario_set_factory
from webapp.models import Scenario

pytestmark = pytest.mark.django_db


def _row(html: str, name: str) -> str:
    found = re.search(rf"<tr><th>{name}</th><td[^>]*>(.*?)</td></tr>", html, re.S)
    assert found, f"no settings row {name}"
    return found.group(1)


def test_the_run_settings_count_training_scenarios_without_the_held_out_ones(client):
    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=3)
    Scenario.objects.create(scenario_set=scenario_set, external_id="v1", user_message="Held out?",
                            split=Scenario.Split.VALIDATION)
    run = run_factory(project=project, scenario_set=scenario_set)
    client.force_login(project.owner)
    html = client.get(f"/runs/{run.id}/").content.decode()
    assert _row(html, "Training scenarios") == "3: s1, s2, s3"
    assert _row(html, "Held-out scenarios") == "1: v1"
