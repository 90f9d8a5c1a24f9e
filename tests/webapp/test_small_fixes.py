"""The smaller defects a new user met (issue 18, item 12): each test failed before its fix."""
from __future__ import annotations

import re

import pytest

from tests.webapp.factories import project_factory, run_factory, scenario_set_factory
from webapp.models import RunStatus, Scenario

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


def test_a_role_change_message_uses_the_right_article(client):
    from tests.webapp.factories import user_factory

    project = project_factory()
    alice = user_factory(username="alice")
    client.force_login(project.owner)
    page = client.post(f"/projects/{project.id}/members/", {"username": "alice", "role": "editor"}, follow=True)
    assert "alice is now an editor" in page.content.decode()
    page = client.post(f"/projects/{project.id}/members/", {"username": alice.username, "role": "viewer"}, follow=True)
    assert "alice is now a viewer" in page.content.decode()


def test_the_invite_page_tells_the_new_member_their_username(client):
    project = project_factory()
    client.force_login(project.owner)
    created = client.post(f"/projects/{project.id}/members/", {"username": "dana", "role": "reviewer",
                                                                "create": "on"}, follow=True).content.decode()
    link = re.search(r"http://testserver(/invite/[^/]+/[^/]+/)", created).group(1)
    client.logout()
    page = client.get(link, follow=True).content.decode()
    assert re.search(r'id="invite-username">dana<', page)


def test_removing_a_member_asks_for_confirmation_first(client):
    from tests.webapp.factories import member_factory

    project = project_factory()
    member = member_factory(project=project)
    client.force_login(project.owner)
    html = client.get(f"/projects/{project.id}/").content.decode()
    form = re.search(rf'<form[^>]*action="/projects/{project.id}/members/{member.id}/remove/"[^>]*>', html)
    assert form and f'data-confirm="Remove {member.username} from this project?' in form.group(0)
    assert '/static/webapp/confirm.js' in html  # the script that asks, on every page


def test_every_page_links_a_favicon_that_is_served(client):
    from django.contrib.staticfiles import finders

    project = project_factory()
    client.force_login(project.owner)
    html = client.get(f"/projects/{project.id}/").content.decode()
    link = re.search(r'<link rel="icon"[^>]*href="/static/([^"]+)"', html)
    assert link and finders.find(link.group(1))
    assert 'rel="icon"' in client.get("/login/").content.decode()


def test_the_runs_list_searches_by_name_and_escapes_the_query(client):
    project = project_factory()
    run_factory(project=project, name="refunds-baseline")
    run_factory(project=project, name="shipping")
    client.force_login(project.owner)
    html = client.get(f"/projects/{project.id}/runs/", {"q": "REFUND"}).content.decode()
    assert "refunds-baseline" in html and "shipping" not in html
    html = client.get(f"/projects/{project.id}/runs/", {"q": "<b>x</b>"}).content.decode()
    assert 'value="&lt;b&gt;x&lt;/b&gt;"' in html and "<b>x</b>" not in html
    assert "No run matches" in html


def test_a_high_score_explained_by_what_the_others_got_wrong_is_not_queued_for_review(client):
    from tests.webapp.test_review import _group
    from webapp.selectors.review import review_queue

    run = run_factory(status=RunStatus.RUNNING)
    _group(run, step=1, index=0, scores=[0.9, 0.4, 0.1], explanations=[
        "Unlike B and C, it does not invent a refund window and is not missing the policy link.",
        "Vague about the window.", "Invents a 90-day window."])
    assert review_queue(run=run) == []


def test_a_retired_scenarios_page_shows_what_the_runs_that_used_it_saw(client):
    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=0)
    retired = Scenario.objects.create(scenario_set=scenario_set, external_id="s1", retired=True,
                                      user_message="Can I return <shoes> after 40 days?", reference="No: 30 days.")
    client.force_login(project.owner)
    html = client.get(f"/scenarios/{retired.id}/").content.decode()
    assert 'id="scenario-retired"' in html
    assert re.search(r'id="scenario-user-message">Can I return &lt;shoes&gt; after 40 days\?<', html)
    assert "No: 30 days." in html


def test_runs_with_the_same_name_get_distinct_labels_in_the_overlay_legend(client):
    import json

    project = project_factory()
    first, second = run_factory(project=project, name="baseline"), run_factory(project=project, name="baseline")
    client.force_login(project.owner)
    html = client.get(f"/projects/{project.id}/runs/compare/?run={first.id}&run={second.id}").content.decode()
    data = json.loads(re.search(r'id="overlay-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert [s["label"] for s in data] == [f"baseline #{first.id}", f"baseline #{second.id}"]
    from django.contrib.staticfiles import finders

    with open(finders.find("webapp/overlay.js"), encoding="utf-8") as script:
        assert "name: s.label" in script.read()  # the legend shows the label


def test_a_run_with_no_step_yet_says_so_instead_of_an_empty_monitor_chart(client):
    run = run_factory(status=RunStatus.RUNNING)
    client.force_login(run.project.owner)
    html = client.get(f"/runs/{run.id}/").content.decode()
    assert re.search(r'<div id="monitor-chart" class="chart" hidden>', html)
    assert re.search(r'<p class="muted" id="monitor-chart-empty">The monitors', html)
