"""The judge check from the judge page, on stored groups, against a judge double that prefers the first answer."""
from __future__ import annotations

import pytest

from tests.judge_double import JudgeDouble
from tests.judging.groups import quality_rule, trajectory
from tests.judging.test_bias import QUALITIES
from tests.webapp.factories import judge_factory, member_factory, project_factory, run_factory
from webapp.models import Role, Trajectory, TrajectoryGroup

pytestmark = pytest.mark.django_db


def _store_groups(run) -> None:
    for g, qualities in enumerate(QUALITIES):
        group = TrajectoryGroup.objects.create(run=run, step_index=1, index=g, scenario_external_id=f"s{g}")
        for i, q in enumerate(qualities):
            Trajectory.objects.create(group=group, index=i, messages=trajectory(q, tag=f"g{g}a{i}"))


def test_the_judge_page_check_measures_flips_and_multi_pass_halves_them(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "k")
    judge_double.responder = JudgeDouble.prefer_first(quality_rule, bonus=0.3)
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    _store_groups(run_factory(project=project))
    client.force_login(project.owner)
    assert 'id="judge-check-link"' in client.get(f"/judges/{judge.pk}/").content.decode()
    page = client.post(f"/judges/{judge.pk}/check/", {"passes": 3}).content.decode()
    # the same groups and double as tests/judging/test_bias.py: 9 of 24 pairs flip with 1 pass, 3 with 3 passes
    assert 'id="flips-single">9 (38%)' in page and 'id="flips-multi">3 (12%)' in page
    assert "Multi-pass halves the flips</th><td>yes" in page


def test_the_check_needs_stored_groups_and_an_editor(client, judge_double):
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base)
    client.force_login(project.owner)
    page = client.post(f"/judges/{judge.pk}/check/", {"passes": 3})
    assert page.status_code == 400 and "no stored groups" in page.content.decode()
    assert not judge_double.requests
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(viewer)
    assert client.post(f"/judges/{judge.pk}/check/", {"passes": 3}).status_code in (403, 404)
