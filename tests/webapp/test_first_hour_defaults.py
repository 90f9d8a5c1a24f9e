"""Defaults taken from context (issue 48, item 6): the playground preselects the rubric version and judge of the run
whose groups it re-scores, the scenario generator's "Drafted by" the project's default judge, and a project made
from the home page's form lists its owner among the members. Read from the rendered pages' initial values."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import (
    PASSWORD, judge_factory, project_factory, rubric_factory, run_factory, scenario_set_factory, user_factory,
)
from tests.webapp.test_review import _group
from webapp.models import Project

pytestmark = pytest.mark.django_db


def _selected(html: str, field: str) -> str | None:
    select = re.search(rf'<select name="{field}"[^>]*>(.*?)</select>', html, re.S)
    assert select, field
    chosen = re.search(r'<option value="(\d+)"[^>]*selected', select.group(1))
    return chosen.group(1) if chosen else None


@pytest.fixture
def rescored_run():
    """A run scored by an older rubric and a judge named late in the alphabet; a newer rubric version and an
    alphabetically first judge made afterwards (what the page used to preselect)."""
    project = project_factory()
    old = rubric_factory(project=project, text="The run's own rubric: concise answers win.").latest_version
    zeta = judge_factory(project=project, name="zeta judge")
    run = run_factory(project=project, status="completed", rubric_version=old, judge_config=zeta)
    group = _group(run, step=0, scores=[0.2, 0.8])[0].group
    newer = rubric_factory(project=project, text="A newer rubric, for other runs.").latest_version
    alpha = judge_factory(project=project, name="alpha judge")
    return {"project": project, "run": run, "group": group, "old": old, "newer": newer, "zeta": zeta,
            "alpha": alpha}


@pytest.mark.parametrize("query", ["run", "group"])
def test_the_playground_preselects_the_rubric_version_and_judge_of_the_run_being_rescored(client, rescored_run,
                                                                                           query):
    world = rescored_run
    client.force_login(world["project"].owner)
    arg = f"run={world['run'].id}" if query == "run" else f"group={world['group'].id}"
    html = client.get(reverse("playground", args=[world["project"].id]) + "?" + arg).content.decode()
    assert _selected(html, "base_version") == str(world["old"].id)
    assert _selected(html, "judge_config") == str(world["zeta"].id)
    assert "The run&#x27;s own rubric: concise answers win." in html and "A newer rubric" not in html
    assert f"as run {world['run'].name} was scored with" in html


def test_the_playground_without_a_run_to_follow_starts_from_the_newest_version(client, rescored_run):
    world = rescored_run
    client.force_login(world["project"].owner)
    html = client.get(reverse("playground", args=[world["project"].id])).content.decode()
    assert _selected(html, "base_version") == str(world["newer"].id)
    assert _selected(html, "judge_config") == str(world["zeta"].id)  # the judge the project's runs use
    assert "was scored with" not in html


def test_the_scenario_generator_is_drafted_by_the_projects_default_judge_not_the_first_by_name(client,
                                                                                              rescored_run):
    world = rescored_run
    scenario_set = scenario_set_factory(project=world["project"])
    client.force_login(world["project"].owner)
    html = client.get(reverse("scenario-set-generate", args=[scenario_set.id])).content.decode()
    assert re.search(rf'<option value="{world["zeta"].id}" selected>zeta judge', html)
    assert f'<option value="{world["alpha"].id}" selected' not in html


def test_a_project_without_runs_has_its_first_judge_as_default_in_the_scenario_generator(client):
    project = project_factory()
    first = judge_factory(project=project, name="zulu judge")
    judge_factory(project=project, name="alpha judge")
    client.force_login(project.owner)
    html = client.get(reverse("scenario-set-generate",
                              args=[scenario_set_factory(project=project).id])).content.decode()
    assert re.search(rf'<option value="{first.id}" selected>zulu judge', html)


def test_a_project_made_from_the_home_page_form_lists_its_owner_as_owner_among_the_members(client):
    person = user_factory()
    client.login(username=person.username, password=PASSWORD)
    page = client.post(reverse("project-list"), {"name": "My first project", "description": ""}, follow=True)
    project = Project.objects.get(name="My first project")
    assert page.redirect_chain[-1][0] == reverse("project-detail", args=[project.id])
    members = re.search(r"<h2>Members</h2>\s*<ul class=\"list\">(.*?)</ul>", page.content.decode(), re.S).group(1)
    owner_row = re.search(r'<li id="member-owner">(.*?)</li>', members, re.S)
    assert owner_row and person.username in owner_row.group(1)
    assert '<span class="badge">owner</span>' in owner_row.group(1)


def test_an_owner_without_a_membership_row_is_still_listed_as_the_owner(client):
    project = project_factory()
    project.memberships.filter(user=project.owner).delete()  # e.g. a project made outside the web form
    client.force_login(project.owner)
    html = client.get(reverse("project-detail", args=[project.id])).content.decode()
    owner_row = re.search(r'<li id="member-owner">(.*?)</li>', html, re.S)
    assert owner_row and project.owner.username in owner_row.group(1) and "editor" in owner_row.group(1)
