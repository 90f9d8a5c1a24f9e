"""Scenarios from a task description: drafted by the judge's model (an OpenAI-compatible HTTP double),
deduplicated, reviewed and edited, stored only when accepted; held-out ones become the run's evaluation set."""
from __future__ import annotations

import pytest

from judging.scenarios import DraftScenario, dedupe
from tests.webapp.factories import agent_factory, judge_factory, project_factory, scenario_set_factory
from webapp.models import Role, Scenario
from webapp.services.projects import membership_set
from webapp.services.run_config import run_config_build

pytestmark = pytest.mark.django_db

DRAFTS = {"scenarios": [
    {"user_message": "Can I return shoes after 40 days?", "reference": "No: returns within 30 days.",
     "difficulty": "medium"},
    {"user_message": "can I return shoes after 40 days", "reference": None, "difficulty": "easy"},  # duplicate
    {"user_message": "<b>Do you ship to Norway?</b>", "reference": None, "difficulty": "hard"},
]}


def test_dedupe_drops_drafts_equal_up_to_case_punctuation_or_mostly_the_same_words():
    drafts = [DraftScenario(user_message=m) for m in
              ["Where is my order?", "where is my ORDER", "Where is my order number 5?", "Cancel my plan"]]
    kept, removed = dedupe(drafts)
    assert [d.user_message for d in kept] == ["Where is my order?", "Where is my order number 5?", "Cancel my plan"]
    assert removed == 1


def test_drafts_are_reviewed_edited_and_only_accepted_ones_are_stored(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    scenario_set = scenario_set_factory(project=project, scenarios=1)
    judge_double.queue(DRAFTS)
    client.force_login(project.owner)
    url = f"/scenario-sets/{scenario_set.pk}/generate/"
    page = client.post(url, {"action": "draft", "task": "Answer questions for a shoe shop", "n": 3,
                             "judge": judge.pk}).content.decode()
    assert "Answer questions for a shoe shop" in judge_double.requests[0].prompt_text
    assert judge_double.requests[0].headers["authorization"] == "Bearer secret"
    assert "1 duplicate removed" in page and "&lt;b&gt;Do you ship to Norway?&lt;/b&gt;" in page
    assert scenario_set.scenarios.count() == 1  # drafts are not stored

    response = client.post(url, {
        "action": "accept", "task": "Answer questions for a shoe shop",
        "user_message-0": "Can I return shoes after 45 days?", "reference-0": "No: 30 days.",
        "difficulty-0": "medium", "split-0": "validation", "keep-0": "on",
        "user_message-1": "Do you ship to Norway?", "reference-1": "", "difficulty-1": "hard", "split-1": "train"})
    assert response.status_code == 302
    added = {s.external_id: s for s in scenario_set.scenarios.filter(external_id__startswith="gen-")}
    assert list(added) == ["gen-1"]  # the second draft was not kept
    kept = added["gen-1"]
    assert kept.user_message == "Can I return shoes after 45 days?" and kept.split == Scenario.Split.VALIDATION
    assert kept.metadata["difficulty"] == "medium"

    config = run_config_build(name="r", agent=agent_factory(project=project), scenario_set=scenario_set,
                              rubric_version=None, judge=None, steps=1, group_size=2, groups_per_step=1,
                              learning_rate=1e-3)
    assert config["evaluation"]["held_out_ids"] == ["gen-1"]
    assert {s["id"] for s in config["scenarios"]} == {"s1", "gen-1"}


def test_a_bad_edit_or_reply_changes_nothing_and_says_why(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    scenario_set = scenario_set_factory(project=project, scenarios=0)
    client.force_login(project.owner)
    url = f"/scenario-sets/{scenario_set.pk}/generate/"
    judge_double.queue("not json")
    page = client.post(url, {"action": "draft", "task": "shoes", "n": 2, "judge": judge.pk})
    assert page.status_code == 400 and "did not reply with usable scenarios" in page.content.decode()
    page = client.post(url, {"action": "accept", "user_message-0": "", "keep-0": "on", "difficulty-0": "easy",
                             "split-0": "train"})
    assert page.status_code == 400 and "draft 1: user_message" in page.content.decode()
    assert scenario_set.scenarios.count() == 0


def test_a_viewer_cannot_generate_scenarios(client):
    project = project_factory()
    scenario_set = scenario_set_factory(project=project)
    viewer = project_factory().owner
    membership_set(project=project, user=viewer, role=Role.VIEWER, acting_user=project.owner)
    client.force_login(viewer)
    assert client.get(f"/scenario-sets/{scenario_set.pk}/generate/").status_code in (403, 404)
