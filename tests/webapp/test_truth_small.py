"""Issue 34, item 8 (the smaller truths), at the view level; the browser tests in test_browser_truth_review.py
show them as a person sees them."""
from __future__ import annotations

import re

import pytest

from tests.webapp.factories import (PASSWORD, agent_factory, judge_factory, project_factory, run_factory,
                                    scenario_set_factory)
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db


def _login(client, user):
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_inline_validation_of_the_launch_form_swaps_no_slot_the_page_lacks(client):
    project = project_factory()
    _login(client, project.owner)
    page = client.get(f"/projects/{project.id}/runs/new/").content.decode()
    slots = set(re.findall(r'id="(err-[\w-]+)"', page))
    response = client.post(f"/projects/{project.id}/runs/new/", {"_validate": "1", "name": "x"},
                           HTTP_HX_REQUEST="true")
    swapped = set(re.findall(r'id="(err-[\w-]+)"[^>]*hx-swap-oob', response.content.decode()))
    assert swapped and swapped <= slots, swapped - slots  # err-launch_token was swapped but has no slot
    assert "err-launch_token" not in swapped


def test_a_run_with_held_out_scenarios_says_its_evaluation_is_pending_before_the_first_one(client):
    project = project_factory()
    run = run_factory(project=project, status=RunStatus.RUNNING, steps=4,
                      overrides={"evaluation": {"held_out_fraction": 0.5, "every": 2}})
    plain = run_factory(project=project, status=RunStatus.RUNNING)
    _login(client, project.owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    pending = page.split('id="eval-pending"')[1].split("</p>")[0]
    assert "Held-out evaluation pending" in page and "every 2" in pending
    assert "Give the\n      run an <code>evaluation</code> section" not in page
    assert "No held-out evaluation yet" in client.get(f"/runs/{plain.id}/").content.decode()


def test_the_scenario_generator_preselects_a_judge_whose_key_is_at_hand_not_the_first_by_name(
        client, monkeypatch, judge_double):
    monkeypatch.delenv("TR_MISSING_KEY", raising=False)
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge_factory(project=project, name="a first by name", api_key_env="TR_MISSING_KEY")
    working = judge_factory(project=project, name="b working", api_base=judge_double.api_base,
                            api_key_env="JUDGE_DOUBLE_API_KEY")
    scenario_set = scenario_set_factory(project=project)
    _login(client, project.owner)
    page = client.get(f"/scenario-sets/{scenario_set.id}/generate/").content.decode()
    select = page.split('<select id="judge"')[1].split("</select>")[0]
    assert re.search(rf'<option value="{working.id}" selected>', select), select
    assert select.index("a first by name") < select.index("b working")  # still listed by name


def test_the_duplicate_launch_warning_comes_before_the_form_fields(client):
    project = project_factory()
    agent = agent_factory(project=project, environment_options={"exact_match": True})
    scenario_set = scenario_set_factory(project=project)
    _login(client, project.owner)
    form = {"kind": "grpo", "name": "twice", "agent": agent.id, "scenario_set": scenario_set.id, "steps": 2,
            "group_size": 2, "groups_per_step": 2, "learning_rate": "0.001", "seed": 0}
    first = client.post(f"/projects/{project.id}/runs/new/", form)
    assert first.status_code == 302, first.content.decode()[:2000]
    again = client.post(f"/projects/{project.id}/runs/new/", form)
    assert again.status_code == 409
    html = again.content.decode()
    assert html.index('id="duplicate-warning"') < html.index('name="name"')
    assert 'tabindex="-1"' in html.split('id="duplicate-warning"')[1].split(">")[0]
