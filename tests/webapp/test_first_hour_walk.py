"""The steps of a newcomer's first walk that were impossible by clicks (issue 48; the whole walk in a browser is
tests/webapp/test_browser_first_hour.py): the run page opens the playground on its own groups, a candidate rubric
of a project that has none is saved as a new rubric, and an override sent twice is recorded once."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.factories import judge_factory, member_factory, run_factory
from tests.webapp.test_review import _group
from webapp.models import Rescore, Role, RunStatus, ScoreOverride

pytestmark = pytest.mark.django_db


def test_the_run_page_opens_the_playground_on_the_runs_groups_all_chosen(client):
    run = run_factory(status=RunStatus.RUNNING)
    groups = [_group(run, step=1, index=i, scores=[0.9, 0.2])[0].group_id for i in range(2)]
    client.force_login(run.project.owner)
    page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    link = f'href="{reverse("playground", args=[run.project_id])}?run={run.id}&amp;all=1" id="run-playground-link"'
    assert link in page
    playground = client.get(reverse("playground", args=[run.project_id]), {"run": run.id, "all": 1}).content.decode()
    chosen = re.findall(r'<input type="checkbox" name="groups" value="(\d+)"[^>]*\bchecked', playground)
    assert sorted(map(int, chosen)) == sorted(groups)


def test_a_candidate_rubric_of_a_project_without_rubrics_is_saved_as_a_new_rubric_named_after_the_agent(client):
    run = run_factory(status=RunStatus.PAUSED)
    group = _group(run, step=1, scores=[0.9, 0.2])[0].group_id
    rescore = Rescore.objects.create(project=run.project, rubric_text="Prefer a legal move.", group_ids=[group],
                                     judge_config=judge_factory(project=run.project), judge_model="openai/judge",
                                     temperature=0.0, passes=1, status=Rescore.Status.DONE)
    client.force_login(run.project.owner)
    page = client.get(reverse("playground-detail", args=[rescore.id])).content.decode()
    assert '<option value="new">a new rubric</option>' in page and "Save as a new rubric<" in page
    client.post(reverse("playground-save", args=[rescore.id]), {"rubric": "new"})
    rescore.refresh_from_db()
    version = rescore.saved_version
    assert version is not None and version.number == 1 and version.text == "Prefer a legal move."
    assert version.rubric.name == f"{run.agent.name} rubric" and version.rubric.project == run.project
    launch = client.get(reverse("playground-detail", args=[rescore.id])).content.decode()
    assert f"rubric={version.rubric_id}" in launch and 'id="launch-from"' in launch


def test_an_override_sent_twice_by_a_double_click_is_recorded_once(client):
    run = run_factory(status=RunStatus.RUNNING)
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    trajectory = _group(run, step=1, scores=[0.9, 0.2])[1]
    client.force_login(reviewer)
    for _ in range(2):
        client.post(reverse("trajectory-override", args=[trajectory.id]), {"score": "1", "reason": "keeps it open"})
    assert list(ScoreOverride.objects.values_list("before", "after", "reason")) == [(None, 1.0, "keeps it open")]
    # A changed score (or reason) is a new decision, audited as such.
    client.post(reverse("trajectory-override", args=[trajectory.id]), {"score": "0.5", "reason": "keeps it open"})
    assert ScoreOverride.objects.count() == 2
