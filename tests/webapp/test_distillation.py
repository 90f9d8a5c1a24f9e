"""Distillation in the web app, through the pages and the in-process judge pool, with a teacher double and a
judge double over real HTTP: the drafts are the judge's best answers, reviewed (edited, dropped, restored) and
accepted as the dataset's next version; a priced teacher stops at its budget; only editors change anything."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from tests.judge_double import JudgeDouble
from tests.webapp.factories import agent_factory, dataset_factory, judge_factory, member_factory, project_factory
from webapp.execution.executors import wait_idle
from webapp.models import Distillation, DistillationDraft, Role, Scenario, ScenarioSet
from webapp.services.secrets import secret_encrypt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def setup(judge_double):
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.9 if "GOOD" in text else 0.2)
    project = project_factory()
    scenario_set = ScenarioSet.objects.create(project=project, name="support")
    for i, question in enumerate(["refund policy?", "opening hours?", "the weather?"]):
        Scenario.objects.create(scenario_set=scenario_set, external_id=f"q{i}", user_message=question)
    judge = judge_factory(project=project, name="judge", model=judge_double.model, api_base=judge_double.api_base,
                          api_key_encrypted=secret_encrypt(plaintext="test"))
    return {"project": project, "scenario_set": scenario_set, "judge": judge,
            "agent": agent_factory(project=project, system_prompt="Answer the customer.", max_tokens=64),
            "dataset": dataset_factory(project=project, rows=2)}


def start(client, s, teacher, **fields):
    body = {"dataset": s["dataset"].id, "agent": s["agent"].id, "scenario_set": s["scenario_set"].id,
            "teacher": teacher.id, "judge_config": s["judge"].id, "answers_per_scenario": 3, "threshold": 0.5,
            "max_scenarios": 10, **fields}
    response = client.post(reverse("distillation-create", args=[s["project"].id]), body)
    assert response.status_code == 302, response.content.decode()[-1500:]
    wait_idle(timeout=120)
    return Distillation.objects.latest("id")


def test_drafts_are_the_judges_best_answers_reviewed_and_accepted_as_a_new_version(setup, inprocess_executor):
    client = Client()
    client.force_login(setup["project"].owner)
    # A teacher whose every other answer is good: the judge must find it among the three.
    asked: dict[str, int] = {}

    def teach(request):  # the second of each question's three answers is good (scenarios run concurrently)
        question = request.messages[-1]["content"]
        asked[question] = n = asked.get(question, 0) + 1
        if "weather" in question:
            return f"Perhaps ({n})."  # never good: below the threshold
        return "GOOD: " + question.upper() if n == 2 else f"meh ({n})"

    with JudgeDouble(responder=teach) as teacher_api:
        teacher = judge_factory(project=setup["project"], name="teacher", model=teacher_api.model,
                                api_base=teacher_api.api_base, api_key_encrypted=secret_encrypt(plaintext="t"))
        job = start(client, setup, teacher)
    assert job.status == Distillation.Status.DONE, job.error
    drafts = {d.scenario_external_id: d for d in job.drafts.all()}
    assert drafts["q0"].status == drafts["q1"].status == DistillationDraft.Status.PENDING
    assert drafts["q0"].messages[-1]["content"] == "GOOD: REFUND POLICY?" and drafts["q0"].judge_score == 0.9
    assert sorted(drafts["q0"].rewards) == [0.2, 0.2, 0.9]
    assert drafts["q2"].status == DistillationDraft.Status.REJECTED and "below the threshold" in drafts["q2"].reason
    assert job.summary["teacher"]["requests"] == 9 and job.summary["judge"]["requests"] == 3
    page = client.get(reverse("distillation-detail", args=[job.id])).content.decode()
    assert "GOOD: REFUND POLICY?" in page and "Accept 2 drafts into" in page

    url = reverse("distillation-draft", args=[drafts["q1"].id])
    client.post(url, {"action": "drop"})
    edited = [*drafts["q0"].messages[:-1], {"role": "assistant", "content": "Within <b>30 days</b>."}]
    client.post(reverse("distillation-draft", args=[drafts["q0"].id]),
                {"action": "edit", "messages": json.dumps(edited)})
    bad = client.post(reverse("distillation-draft", args=[drafts["q0"].id]),
                      {"action": "edit", "messages": '[{"role": "user", "content": "no answer"}]'}, follow=True)
    assert "no assistant message" in bad.content.decode()  # refused, the earlier edit kept
    page = client.get(reverse("distillation-detail", args=[job.id])).content.decode()
    assert "Within &lt;b&gt;30 days&lt;/b&gt;." in page  # escaped, as every answer is

    response = client.post(reverse("distillation-accept", args=[job.id]))
    assert response.status_code == 302
    version = setup["dataset"].latest_version
    assert version.number == 2 and version.source == "distillation" and version.row_count == 3
    added = version.rows.order_by("index").last()
    assert added.messages == edited and added.metadata["scenario_id"] == "q0" and added.metadata["edited"]
    assert added.metadata["judge_score"] == 0.9 and added.metadata["teacher"] == teacher.model
    job.refresh_from_db()
    assert job.status == Distillation.Status.ACCEPTED and job.accepted_version == version
    again = client.post(reverse("distillation-accept", args=[job.id]), follow=True)
    assert "cannot be accepted" in again.content.decode() and setup["dataset"].versions.count() == 2


def test_a_priced_teacher_stops_the_job_at_its_budget(setup, inprocess_executor):
    client = Client()
    client.force_login(setup["project"].owner)
    setup["judge"].concurrency = 1  # one scenario at a time, so the budget is checked between them
    setup["judge"].save()
    # gpt-4o-mini's price for 10k + 10k tokens is $0.0075 a request: the second request passes the $0.01 budget,
    # so the third is never sent, and no other scenario starts.
    with JudgeDouble(responder=lambda r: f"GOOD: yes ({len(teacher_api.requests)})", usage=(10000, 10000)) \
            as teacher_api:
        teacher = judge_factory(project=setup["project"], name="priced", model="openai/gpt-4o-mini",
                                api_base=teacher_api.api_base, api_key_encrypted=secret_encrypt(plaintext="t"),
                                budget_usd="0.01", concurrency=1)
        job = start(client, setup, teacher, answers_per_scenario=4)
    assert job.status == Distillation.Status.STOPPED
    assert job.summary["stopped"] == ["the teacher's budget of $0.01 is spent"]
    assert job.summary["done"] == 1 < job.summary["scenarios"] == 3
    assert job.summary["teacher"]["cost_usd"] == pytest.approx(0.015) and job.summary["teacher"]["requests"] == 2
    (draft,) = job.drafts.all()
    assert draft.candidates == 2 and draft.status == DistillationDraft.Status.PENDING  # the answers it paid for
    assert "stopped: the teacher" in client.get(reverse("distillation-detail", args=[job.id])).content.decode()


def test_only_editors_start_review_or_accept(setup, inprocess_executor):
    viewer = member_factory(project=setup["project"], role=Role.REVIEWER)
    outsider = project_factory().owner
    for user, status in ((viewer, 403), (outsider, 404)):
        client = Client()
        client.force_login(user)
        body = {"dataset": setup["dataset"].id, "agent": setup["agent"].id, "scenario_set": setup["scenario_set"].id,
                "teacher": setup["judge"].id, "judge_config": setup["judge"].id, "answers_per_scenario": 2,
                "threshold": 0.5, "max_scenarios": 5}
        assert client.post(reverse("distillation-create", args=[setup["project"].id]), body).status_code == status
    assert not Distillation.objects.exists()
