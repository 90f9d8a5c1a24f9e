"""/metrics as Prometheus scrapes it: refused without the deployment's token, and every named metric carries the
values of the rows and records the test made."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.webapp.factories import project_factory, run_factory
from tests.webapp.live_socket import run_socket
from webapp.models import JudgeCall, Run, Step
from webapp.operations import heartbeats
from webapp.services.external_inflight import inflight_acquire, inflight_release
from webapp.services.external_proxy import TooManyInFlight, call_slot

TOKEN = "metrics-token-for-tests-0123456789"


@pytest.fixture
def metrics_token(settings):
    settings.STUDIO_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.content.decode()) for sample in family.samples}


@pytest.mark.django_db
def test_metrics_is_not_served_when_the_deployment_set_no_token(client, settings):
    settings.STUDIO_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token-0123456789", f"Token {TOKEN}", "Bearer "])
def test_metrics_refuses_a_scrape_without_the_token(client, metrics_token, authorization):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = client.get("/metrics", **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"studio_runs" not in response.content


@pytest.mark.django_db
def test_metrics_count_runs_by_status_and_the_queue_with_its_oldest_wait(client, metrics_token):
    project = project_factory()
    waiting = run_factory(project=project, status="queued")
    Run.objects.filter(pk=waiting.pk).update(created_at=timezone.now() - timedelta(minutes=10))
    run_factory(project=project, status="queued")
    run_factory(project=project, status="running")
    run_factory(project=project, status="completed")

    values = scrape(client)

    assert values[("studio_runs", (("status", "queued"),))] == 2
    assert values[("studio_runs", (("status", "running"),))] == 1
    assert values[("studio_runs", (("status", "completed"),))] == 1
    assert values[("studio_runs", (("status", "crashed"),))] == 0
    assert values[("studio_run_queue_depth", ())] == 2
    assert 600 <= values[("studio_run_queue_oldest_wait_seconds", ())] < 660
    assert values[("studio_metrics_source_up", (("source", "database"),))] == 1
    assert values[("studio_metrics_source_up", (("source", "redis"),))] == 1


@pytest.mark.django_db
def test_metrics_sum_step_times_by_stage_and_judge_calls_tokens_and_spend(client, metrics_token):
    run = run_factory(status="running")
    Step.objects.create(run=run, index=1, metrics={"time_rollout_s": 2.5, "time_scoring_s": 1.0, "time_step_s": 4.0})
    Step.objects.create(run=run, index=2, metrics={"time_rollout_s": 3.5, "time_train_s": 0.5, "time_step_s": 5.0})
    JudgeCall.objects.create(run=run, judge_model="openai/judge-a", prompt_tokens=100, completion_tokens=20,
                             cost_usd=0.25)
    JudgeCall.objects.create(run=run, judge_model="openai/judge-a", prompt_tokens=50, completion_tokens=10,
                             cost_usd=0.5)
    JudgeCall.objects.create(run=run, judge_model="openai/judge-a", cached=True)

    values = scrape(client)

    assert values[("studio_step_stage_seconds_sum", (("stage", "rollout"),))] == 6.0
    assert values[("studio_step_stage_seconds_count", (("stage", "rollout"),))] == 2
    assert values[("studio_step_stage_seconds_sum", (("stage", "train"),))] == 0.5
    assert values[("studio_step_stage_seconds_count", (("stage", "train"),))] == 1
    assert values[("studio_step_stage_seconds_sum", (("stage", "step"),))] == 9.0
    model = ("judge_model", "openai/judge-a")
    assert values[("studio_judge_calls_total", (("cached", "false"), model))] == 2
    assert values[("studio_judge_calls_total", (("cached", "true"), model))] == 1
    assert values[("studio_judge_tokens_total", (model, ("kind", "prompt")))] == 150
    assert values[("studio_judge_tokens_total", (model, ("kind", "completion")))] == 30
    assert values[("studio_judge_cost_usd_total", (model,))] == 0.75


@pytest.mark.django_db
def test_metrics_show_endpoint_calls_in_flight_and_those_refused(client, metrics_token, settings):
    run = run_factory(status="running")
    settings.STUDIO_EXTERNAL_MAX_IN_FLIGHT = 1
    before = scrape(client).get(("studio_endpoint_calls_refused_total", (("reason", "in_flight"),)), 0)
    slot = inflight_acquire(scope=f"run:{run.pk}", cap=1, hold_s=60)
    assert slot is not None
    try:
        with pytest.raises(TooManyInFlight):
            call_slot(f"run:{run.pk}", 60, f"run {run.pk}")
        values = scrape(client)
    finally:
        inflight_release(scope=f"run:{run.pk}", slot=slot)

    assert values[("studio_endpoint_calls_in_flight", (("scope", "run"),))] == 1
    assert values[("studio_endpoint_calls_in_flight", (("scope", "project-server"),))] == 0
    assert values[("studio_endpoint_calls_refused_total", (("reason", "in_flight"),))] == before + 1


@pytest.mark.django_db
def test_metrics_show_workers_heard_and_task_outcomes_from_redis(client, metrics_token):
    heartbeats.worker_beat(worker="gpu@a", queues=["gpu"])
    heartbeats.task_outcome_count(task="webapp.tasks.run_execute_task", outcome="success")
    heartbeats.task_outcome_count(task="webapp.tasks.run_execute_task", outcome="success")
    heartbeats.task_outcome_count(task="webapp.tasks.run_execute_task", outcome="failure")

    values = scrape(client)

    assert values[("studio_workers_heard", (("queue", "gpu"),))] == 1
    assert values[("studio_workers_heard", (("queue", "judge"),))] == 0
    task = ("task", "webapp.tasks.run_execute_task")
    assert values[("studio_celery_tasks_total", (("outcome", "success"), task))] == 2
    assert values[("studio_celery_tasks_total", (("outcome", "failure"), task))] == 1
    assert values[("studio_celery_queue_messages", (("queue", "gpu"),))] >= 0


@pytest.mark.django_db
def test_metrics_leave_out_redis_and_say_so_when_it_does_not_answer(client, metrics_token, settings):
    from tests.ports import free_port

    run_factory(status="queued")
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/1"

    values = scrape(client)

    assert values[("studio_metrics_source_up", (("source", "redis"),))] == 0
    assert values[("studio_runs", (("status", "queued"),))] == 1  # the database's part still answers
    assert not any(name.startswith("studio_celery") for name, _ in values)


@pytest.mark.django_db(transaction=True)
async def test_metrics_count_the_run_pages_watching_live(client, metrics_token):
    run = await sync_to_async(run_factory)(status="running")
    owner = await sync_to_async(lambda: run.project.owner)()
    socket = run_socket(owner, run.pk)
    connected, _ = await socket.connect()
    assert connected
    try:
        watching = await sync_to_async(scrape)(client)
        assert watching[("studio_websocket_watchers", ())] == 1
    finally:
        await socket.disconnect()
    assert (await sync_to_async(scrape)(client))[("studio_websocket_watchers", ())] == 0
