"""The run page's buttons and the launch form: what a click gets back, what the form preselects, and what a
second identical launch is told."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import (
    agent_factory, judge_factory, project_factory, rubric_factory, run_factory, scenario_set_factory,
)
from tests.webapp.test_review import _group
from webapp.models import Rescore, Run, RunStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("action, status, shown", [("pause", RunStatus.RUNNING, "Pausing"),
                                                   ("resume", RunStatus.PAUSED, "Running"),
                                                   ("cancel", RunStatus.RUNNING, "Running")])
def test_an_htmx_click_on_pause_resume_or_cancel_gets_the_new_header_back(client, action, status, shown):
    run = run_factory(status=status, worker="w")
    client.force_login(run.project.owner)
    response = client.post(reverse("run-control", args=[run.id, action]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="run-header"' in body and f'id="run-status">{shown}<' in body
    if action == "cancel":
        assert "cancelling at the next phase boundary" in body


def test_an_htmx_click_the_run_refuses_gets_the_header_with_the_reason(client):
    run = run_factory(status=RunStatus.COMPLETED)
    client.force_login(run.project.owner)
    response = client.post(reverse("run-control", args=[run.id, "pause"]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "a completed run cannot be paused" in response.content.decode()
    assert Run.objects.get(pk=run.id).status == RunStatus.COMPLETED


def _selected(html: str, field: str) -> str | None:
    select = re.search(rf'<select name="{field}"[^>]*>(.*?)</select>', html, re.S)
    assert select, field
    chosen = re.search(r'<option value="(\d+)"[^>]*selected', select.group(1))
    return chosen.group(1) if chosen else None


def test_launch_a_run_with_it_preselects_the_judge_agent_and_scenarios_the_playground_used(client):
    project = project_factory()
    agent_factory(project=project, name="first agent")
    scenario_set_factory(project=project, name="first scenarios")
    judge_factory(project=project, name="first judge")
    agent = agent_factory(project=project, name="used agent")
    scenarios = scenario_set_factory(project=project, name="used scenarios")
    judge = judge_factory(project=project, name="used judge")
    rubric = rubric_factory(project=project)
    run = run_factory(project=project, agent=agent, scenario_set=scenarios, judge_config=judge,
                      status=RunStatus.COMPLETED)
    group = _group(run, step=1, scores=[0.9, 0.1])[0].group
    rescore = Rescore.objects.create(project=project, rubric_text="Prefer short answers.", judge_config=judge,
                                     judge_model=judge.model, group_ids=[group.id], status=Rescore.Status.DONE,
                                     saved_version=rubric.latest_version, summary={})
    client.force_login(project.owner)
    page = client.get(reverse("playground-detail", args=[rescore.id])).content.decode()
    link = re.search(r'id="launch-from" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    form = client.get(link).content.decode()
    assert _selected(form, "agent") == str(agent.id)
    assert _selected(form, "scenario_set") == str(scenarios.id)
    assert _selected(form, "judge_config") == str(judge.id)
    assert _selected(form, "rubric") == str(rubric.id)


def _launch_fields(client, project) -> dict:
    """The launch form as the browser would submit it: its fields, its one-time token, a few changes."""
    form = client.get(reverse("run-launch", args=[project.id])).content.decode()
    token = re.search(r'name="launch_token" value="([0-9a-f]+)"', form).group(1)
    return {"name": "my-run", "agent": _selected(form, "agent"), "scenario_set": _selected(form, "scenario_set"),
            "steps": "3", "group_size": "2", "groups_per_step": "1", "learning_rate": "0.001", "seed": "0",
            "overrides": "", "launch_token": token}


def test_launching_again_from_a_fresh_form_warns_links_the_first_run_and_launches_only_if_asked(client):
    project = project_factory()
    agent_factory(project=project, environment_options={"exact_match": True})  # scores itself: no judge
    scenario_set_factory(project=project)
    client.force_login(project.owner)
    first = client.post(reverse("run-launch", args=[project.id]), _launch_fields(client, project))
    assert first.status_code == 302
    run = Run.objects.get(project=project)

    again = _launch_fields(client, project)  # Back: the form comes again with a new token, refilled
    warned = client.post(reverse("run-launch", args=[project.id]), again)
    assert warned.status_code == 409
    page = warned.content.decode()
    assert "You launched an identical run" in page and f'href="/runs/{run.id}/"' in page
    assert Run.objects.filter(project=project).count() == 1

    changed = client.post(reverse("run-launch", args=[project.id]), {**again, "steps": "4"})
    assert changed.status_code == 302  # a different launch is not a duplicate
    assert Run.objects.filter(project=project).count() == 2

    anyway = client.post(reverse("run-launch", args=[project.id]), {**_launch_fields(client, project),
                                                                     "launch_anyway": "1"})
    assert anyway.status_code == 302 and Run.objects.filter(project=project).count() == 3


def test_an_identical_launch_by_another_member_or_after_the_window_is_not_a_duplicate(client):
    from datetime import timedelta

    from django.utils import timezone

    from tests.webapp.factories import member_factory
    from webapp.models import Role
    from webapp.services.runs import DUPLICATE_WINDOW

    project = project_factory()
    agent_factory(project=project, environment_options={"exact_match": True})  # scores itself: no judge
    scenario_set_factory(project=project)
    client.force_login(project.owner)
    assert client.post(reverse("run-launch", args=[project.id]), _launch_fields(client, project)).status_code == 302
    colleague = member_factory(project=project, role=Role.EDITOR)
    client.force_login(colleague)
    assert client.post(reverse("run-launch", args=[project.id]), _launch_fields(client, project)).status_code == 302
    Run.objects.filter(project=project).update(created_at=timezone.now() - DUPLICATE_WINDOW - timedelta(seconds=5))
    assert client.post(reverse("run-launch", args=[project.id]), _launch_fields(client, project)).status_code == 302
    assert Run.objects.filter(project=project).count() == 3
