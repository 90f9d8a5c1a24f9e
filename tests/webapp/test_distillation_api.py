"""The distillation API (issue 36): create, list, read, cancel and read the drafts, with token auth, through the same
services as the pages; a teacher double and the judge double over real HTTP. Bounds are refused by name with
nothing created; members of other projects get 404, viewers 403 on what changes anything; a cancel stops a running
job before its next scenario and keeps the drafts it made."""
from __future__ import annotations

import threading
import time

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.judge_double import JudgeDouble
from tests.webapp.conftest import wait_for
from tests.webapp.factories import agent_factory, dataset_factory, judge_factory, member_factory, project_factory
from webapp.execution.executors import wait_idle
from webapp.models import Distillation, Role, Scenario, ScenarioSet
from webapp.services.distillation import distillation_execute
from webapp.services.secrets import secret_encrypt

pytestmark = pytest.mark.django_db(transaction=True)


def api_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def setup(judge_double):
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.9 if "GOOD" in text else 0.2)
    project = project_factory()
    scenario_set = ScenarioSet.objects.create(project=project, name="support")
    for i, question in enumerate(["refund policy?", "opening hours?", "the weather?"]):
        Scenario.objects.create(scenario_set=scenario_set, external_id=f"q{i}", user_message=question)
    judge = judge_factory(project=project, name="judge", model=judge_double.model, api_base=judge_double.api_base,
                          api_key_encrypted=secret_encrypt(plaintext="test"))
    agent = agent_factory(project=project, system_prompt="Answer the customer.", max_tokens=64)
    dataset = dataset_factory(project=project, rows=1)
    body = {"project": project.id, "dataset": dataset.id, "agent": agent.id, "scenario_set": scenario_set.id,
            "judge_config": judge.id, "answers_per_scenario": 2, "threshold": 0.5, "max_scenarios": 10}
    return {"project": project, "judge": judge, "body": body}


def numbered(request, _counts={}, _lock=threading.Lock()):
    """A good answer, numbered per question: two answers to one question differ (identical ones are not ranked)."""
    question = request.messages[-1]["content"]
    with _lock:
        _counts[question] = n = _counts.get(question, 0) + 1
    return f"GOOD: {question} ({n})"


def _teacher(project, api, **fields):
    return judge_factory(project=project, name="teacher", model=api.model, api_base=api.api_base,
                         api_key_encrypted=secret_encrypt(plaintext="t"), **fields)


def test_a_distillation_is_created_listed_read_and_its_drafts_paged_through_the_api(setup, inprocess_executor):
    client = api_client(setup["project"].owner)
    with JudgeDouble(responder=numbered) as teacher_api:
        teacher = _teacher(setup["project"], teacher_api)
        created = client.post("/api/distillations/", {**setup["body"], "teacher": teacher.id}, format="json")
        assert created.status_code == 201, created.content
        wait_idle(timeout=120)
    job_id = created.json()["id"]
    assert created.json()["teacher_model"] == teacher_api.model and created.json()["status"] == "queued"
    detail = client.get(f"/api/distillations/{job_id}/").json()
    assert detail["status"] == "done" and detail["summary"]["teacher"]["requests"] == 6
    assert detail["summary"]["chosen"] == 3 and detail["teacher"] == teacher.id
    drafts = client.get(f"/api/distillations/{job_id}/drafts/?limit=2").json()
    assert drafts["count"] == 3 and [d["scenario_external_id"] for d in drafts["results"]] == ["q0", "q1"]
    assert drafts["results"][0]["messages"][-1]["content"].startswith("GOOD: refund policy? (")
    assert drafts["results"][0]["judge_score"] == 0.9
    listed = client.get(f"/api/distillations/?project={setup['project'].id}").json()
    assert [d["id"] for d in listed["results"]] == [job_id]
    assert client.get(f"/api/distillations/?project={project_factory().id}").json()["count"] == 0
    # another project's admin neither reads nor cancels it, nor learns it exists
    stranger = api_client(project_factory().owner)
    assert stranger.get(f"/api/distillations/{job_id}/").status_code == 404
    assert stranger.get(f"/api/distillations/{job_id}/drafts/").status_code == 404
    assert stranger.post(f"/api/distillations/{job_id}/cancel/").status_code == 404
    assert stranger.get("/api/distillations/").json()["count"] == 0
    # a finished job cannot be cancelled
    refused = client.post(f"/api/distillations/{job_id}/cancel/")
    assert refused.status_code == 400 and "cannot be cancelled" in refused.json()["detail"]


@pytest.mark.parametrize("field,value", [("answers_per_scenario", 1), ("answers_per_scenario", 17),
                                         ("threshold", 1.5), ("threshold", -0.1), ("max_scenarios", 0),
                                         ("max_scenarios", 501), ("dataset", 0)])
def test_values_out_of_bounds_are_refused_by_name_and_nothing_is_created(setup, field, value, settings):
    settings.STUDIO_EXECUTOR = "celery"  # nothing consumes it here; nothing may be queued anyway
    client = api_client(setup["project"].owner)
    response = client.post("/api/distillations/", {**setup["body"], "teacher": setup["judge"].id, field: value},
                           format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Distillation.objects.exists()


def test_a_viewer_reads_but_neither_creates_nor_cancels_and_a_queued_job_cancelled_never_runs(setup, settings):
    settings.STUDIO_EXECUTOR = "celery"  # queued, nothing consumes it: the job stays queued until cancelled
    editor = api_client(setup["project"].owner)
    viewer_user = member_factory(project=setup["project"], role=Role.VIEWER)
    viewer = api_client(viewer_user)
    body = {**setup["body"], "teacher": setup["judge"].id}
    assert viewer.post("/api/distillations/", body, format="json").status_code == 403
    job_id = editor.post("/api/distillations/", body, format="json").json()["id"]
    assert viewer.get(f"/api/distillations/{job_id}/").json()["status"] == "queued"
    assert viewer.post(f"/api/distillations/{job_id}/cancel/").status_code == 403
    assert Distillation.objects.get(pk=job_id).status == "queued"
    cancelled = editor.post(f"/api/distillations/{job_id}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert distillation_execute(distillation_id=job_id) == "skipped"  # the worker that gets it later skips it
    job = Distillation.objects.get(pk=job_id)
    assert job.status == "cancelled" and not job.drafts.exists()


def test_a_running_job_cancelled_stops_before_its_next_scenario_and_keeps_its_drafts(setup, inprocess_executor):
    setup["judge"].concurrency = 1  # one scenario at a time
    setup["judge"].save()
    release, asked = threading.Event(), threading.Event()

    def slow_teacher(request):
        asked.set()
        release.wait(timeout=60)  # the first scenario's answers wait until the job is cancelled
        return numbered(request)

    client = api_client(setup["project"].owner)
    with JudgeDouble(responder=slow_teacher) as teacher_api:
        teacher = _teacher(setup["project"], teacher_api)
        job_id = client.post("/api/distillations/", {**setup["body"], "teacher": teacher.id},
                             format="json").json()["id"]
        assert asked.wait(timeout=60), "the teacher was never asked"
        assert client.get(f"/api/distillations/{job_id}/").json()["status"] == "running"
        assert client.post(f"/api/distillations/{job_id}/cancel/").json()["status"] == "cancelled"
        time.sleep(4 * 0.5)  # a few of the worker's heartbeats (STUDIO_HEARTBEAT_S in the tests): it notices
        release.set()
        wait_idle(timeout=120)
    job = wait_for(lambda: Distillation.objects.filter(pk=job_id, finished_at__isnull=False).first(),
                   message="the job's end")
    assert job.status == "cancelled" and job.summary["cancelled"]
    assert job.summary["done"] == 1 < job.summary["scenarios"] == 3
    assert job.summary["teacher"]["requests"] == 2  # the scenario under way finished; no other was asked
    (draft,) = job.drafts.all()
    assert draft.scenario_external_id == "q0" and draft.status == "pending"  # kept for review
