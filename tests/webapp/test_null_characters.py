"""A model, a judge or a tool that writes U+0000 (the tiny models' byte-level tokenizers have a token for byte 0)
loses nothing: PostgreSQL's text and jsonb cannot hold the character, so it is kept as U+FFFD on every backend;
the token ids that train stay as sampled. A person's upload with one is refused with a clear error instead."""
from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from tests.webapp.factories import run_factory
from tests.webapp.test_external_rollouts import external_run, open_step, submit, user_client
from webapp.live.ingest import run_event_ingest
from webapp.models import ExternalGroup, RunEvent, RunStatus, Trajectory
from webapp.services.external_calls import external_call_record

pytestmark = pytest.mark.django_db
NUL, KEPT = "\x00", "\ufffd"


def test_a_scored_group_whose_model_judge_and_tools_wrote_nul_is_stored_whole_and_shown():
    assert connection.vendor == "postgresql"  # the backend that refused the character; SQLite keeps it anyway
    run = run_factory(status=RunStatus.RUNNING)
    records = [{"messages": [{"role": "user", "content": "Play."},
                             {"role": "assistant", "content": f"<move{NUL}>left</move>"},
                             {"role": "tool", "content": f"board{NUL}"}],
                "reward": 0.8 - 0.4 * i, "judge_score": 0.8 - 0.4 * i, "advantage": 0.0,
                "explanation": f"moved {NUL}left", "criteria": {f"form{NUL}": 1.0},
                "metadata": {"note": NUL}, "error": ""} for i in range(2)]
    records.append({"messages": [{"role": "user", "content": "Play."}], "error": f"parse{NUL} failed"})
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
                                           "trajectories": records, "reward_mean": 0.6, "reward_std": 0.2,
                                           "skipped": False})

    stored = list(Trajectory.objects.filter(group__run=run).order_by("index"))
    assert len(stored) == 3  # nothing lost
    assert [m["content"] for m in stored[0].messages[1:]] == [f"<move{KEPT}>left</move>", f"board{KEPT}"]
    assert stored[0].explanation == f"moved {KEPT}left"
    assert (stored[0].criteria, stored[0].metadata) == ({f"form{KEPT}": 1.0}, {"note": KEPT})
    assert stored[2].error == f"parse{KEPT} failed" and stored[0].judge_score == 0.8
    live = RunEvent.objects.get(run=run, kind="group_scored").payload["trajectories"]
    assert [t["explanation"] for t in live][:2] == [f"moved {KEPT}left"] * 2

    run_event_ingest(run_id=run.id, event={"kind": "run_failed", "error": f"TrainingError: the model wrote {NUL}"})
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error.endswith(f"wrote {KEPT}")

    from django.test import Client
    client = Client()
    client.force_login(run.project.owner)
    page = client.get(reverse("trajectory-detail", args=[stored[0].id]))
    assert page.status_code == 200 and f"&lt;move{KEPT}&gt;left&lt;/move&gt;" in page.content.decode()


def test_an_external_agents_turn_with_nul_is_recorded_and_its_group_trains_on_the_sampled_ids():
    run = external_run()
    model = open_step(run)
    question = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Question 1?"}]
    external_call_record(run=run, trajectory_key="t1", step=1, messages=question, tools=None, completion={
        "model": model, "usage": {"completion_tokens": 3},
        "choices": [{"message": {"role": "assistant", "content": f"ok{NUL}!"}, "token_ids": [7, 0, 9],
                     "logprobs": {"content": [{"token": t, "logprob": -0.5} for t in ("ok", NUL, "!")]},
                     "finish_reason": "stop"}]})
    # The client sends the conversation as it received it, the character still in it.
    answered = [*question, {"role": "assistant", "content": f"ok{NUL}!"}]
    response = submit(user_client(run.project.owner), run,
                      {"step": 1, "group_index": 0, "trajectories": [{"id": "t1", "messages": answered, "reward": 1}]})
    assert response.status_code == 201, response.content
    trajectory = ExternalGroup.objects.get(run=run).trajectories[0]
    assert trajectory["messages"][-1]["content"] == f"ok{KEPT}!"
    assert trajectory["turn_token_ids"] == [[7, 0, 9]]  # the ids that train are the sampled ones


@pytest.mark.django_db(transaction=True)
def test_a_playground_judge_that_explains_with_nul_finishes_its_rescore(judge_double, inprocess_executor, monkeypatch):
    from tests.judge_double import JudgeDouble
    from tests.webapp.test_playground import _api, _labelled_run
    from webapp.execution.executors import wait_idle
    from webapp.models import Rescore

    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    run, judge, rubric, trajectories = _labelled_run(judge_double)
    scores = JudgeDouble.score_by(lambda text: 0.9 if "non-refundable" in text else 0.1)

    def respond(request):
        reply = scores(request)
        for item in reply["scores"]:
            item["explanation"] += f" {NUL}"
        return reply

    judge_double.responder = respond
    created = _api(run.project.owner).post("/api/playground/", {
        "project": run.project_id, "group_ids": [trajectories[0].group_id], "judge_config": judge.id,
        "base_version": rubric.latest_version.id, "rubric_text": "Prefer faithful answers."}, format="json")
    assert created.status_code == 201, created.json()
    wait_idle(timeout=60)
    rescore = Rescore.objects.get(pk=created.json()["id"])
    assert rescore.status == "done", rescore.error
    assert all(KEPT in t["explanation"] for t in rescore.results[0]["trajectories"])


def test_a_persons_json_with_nul_is_refused_by_the_api_and_the_forms_and_nothing_is_stored(client):
    """DRF's and Django's text fields refuse U+0000; JSON fields took it ("\\u0000") on to PostgreSQL: a 500."""
    from rest_framework.test import APIClient

    from tests.webapp.factories import project_factory, scenario_set_factory
    from webapp.models import Agent, Scenario

    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=1)
    api = APIClient()
    api.force_authenticate(project.owner)
    response = api.post(f"/api/scenario-sets/{scenario_set.pk}/scenarios/",
                        {"user_message": "Where?", "metadata": {"note": f"a{NUL}b"}}, format="json")
    assert response.status_code == 400 and "U+0000" in response.json()["detail"]
    response = api.post("/api/agents/", {"project": project.pk, "name": "a", "base_model": "tiny-2048",
                                         "environment_kind": "tools",
                                         "environment_options": {f"tools{NUL}": ["calculator"]}}, format="json")
    assert response.status_code == 400 and "U+0000" in response.json()["detail"]
    assert Scenario.objects.filter(scenario_set=scenario_set).count() == 1 and not Agent.objects.exists()

    client.force_login(project.owner)
    page = client.post(f"/projects/{project.pk}/agents/new/", {
        "name": "b", "base_model": "tiny-2048", "environment_kind": "tools",
        "environment_options": '{"tools": ["calculator\\u0000"]}', "temperature": 1.0, "top_p": 1.0,
        "max_tokens": 256})
    assert page.status_code == 400 and "holds a null character (U+0000)" in page.content.decode()
    assert not Agent.objects.exists()
    # The same body without the character is taken: the refusal is about the character alone.
    response = api.post(f"/api/scenario-sets/{scenario_set.pk}/scenarios/",
                        {"user_message": "Where?", "metadata": {"note": "ab"}}, format="json")
    assert response.status_code == 201, response.content


def test_tools_a_server_lists_with_nul_are_kept_with_the_replacement_character(settings):
    from tests.training.mcp_helpers import FAULT_SERVER
    from tests.webapp.factories import project_factory
    from tests.webapp.mcp_web_helpers import set_catalogue
    from webapp.execution.mcp_testing import mcp_server_test_execute
    from webapp.services import mcp_servers as svc

    set_catalogue(settings, faults={"args": [FAULT_SERVER, "nul"]})
    project = project_factory()
    server = svc.mcp_server_create(user=project.owner, project=project, name="faults", transport="stdio",
                                   catalogue_entry="faults")
    svc.mcp_server_test_request(user=project.owner, server=server)
    assert mcp_server_test_execute(server_id=server.pk) == "ok", type(server).objects.get(pk=server.pk).test_error
    server.refresh_from_db()
    echo = next(t["function"] for t in server.tools if t["function"]["name"] == "echo")
    assert echo["description"] == f"Echo{KEPT} the text."
