"""External rollouts, the web app's side (issue 21): project tokens, the step a run waits for, group submission
with each refusal, calls recorded through the run's OpenAI-compatible endpoint (in front of the project's own
local inference server on the tiny model), and the runner forwarding submitted groups to the engine."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import openai
import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.ports import closed_port
from tests.webapp.conftest import ROOT, wait_for
from tests.webapp.factories import (
    TEST_TINY_MODEL, agent_factory, judge_factory, member_factory, project_factory, run_factory,
)
from webapp.live.ingest import run_event_ingest
from webapp.models import ExternalCall, ExternalGroup, Role, RunEvent, RunStatus
from webapp.services.project_tokens import project_token_create, project_token_revoke

pytestmark = pytest.mark.django_db


def external_run(*, project=None, judge: bool = True, status: str = RunStatus.RUNNING, **fields):
    project = project or project_factory()
    agent = agent_factory(project=project, environment_kind="external", environment_options={})
    return run_factory(project=project, agent=agent, status=status,
                       judge_config=judge_factory(project=project) if judge else None, **fields)


def open_step(run, *, step: int = 1, model: str | None = None, base_url: str = "http://127.0.0.1:9/v1",
              allow_unsampled: bool = False, timeout_s: float = 600.0) -> str:
    model = model or f"{run.config['name']}@{step - 1}"
    run_event_ingest(run_id=run.id, event={
        "kind": "rollouts_wanted", "step": step, "model": model, "base_url": base_url, "timeout_s": timeout_s,
        "on_missing": "skip", "allow_unsampled": allow_unsampled, "group_size": 2, "system_prompt": "Answer.",
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8},
        "groups": [{"group_index": i, "scenario": {"id": f"s{i + 1}", "user_message": f"Question {i + 1}?",
                                                   "context": None, "metadata": {}}} for i in range(2)]})
    return model


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def user_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def recorded(run, key: str, text: str, *, model: str, token_ids=(5, 6), group: int = 0, step: int = 1
             ) -> ExternalCall:
    """A call as the endpoint records it (the endpoint itself is tested against a real server below): sampled in
    its group's context, the run's system prompt and the group's scenario."""
    from training.rl.external import group_opening
    from webapp.services.external_calls import external_call_record

    wanted = RunEvent.objects.filter(run=run, kind="rollouts_wanted", payload__step=step).latest("seq").payload
    scenario = next(g["scenario"] for g in wanted["groups"] if g["group_index"] == group)
    return external_call_record(
        run=run, trajectory_key=key, step=step, messages=group_opening(scenario, wanted["system_prompt"]),
        tools=None, completion={"model": model, "usage": {"completion_tokens": len(token_ids)}, "choices": [
            {"message": {"role": "assistant", "content": text}, "token_ids": list(token_ids),
             "logprobs": {"content": [{"logprob": -0.5} for _ in token_ids]}, "finish_reason": "stop"}]})


def submit(client: APIClient, run, body: dict, **headers):
    return client.post(f"/api/runs/{run.id}/rollouts/groups/", body, format="json", **headers)


# --- tokens -------------------------------------------------------------------------------------------------


def test_a_project_token_works_on_its_projects_runs_and_is_refused_after_revocation():
    run = external_run()
    token, key = project_token_create(user=run.project.owner, project=run.project, name="laptop")
    assert key.startswith("rs_") and len(key) == 43 and token.prefix == key[:8] and key not in token.key_hash
    assert bearer(key).get(f"/api/runs/{run.id}/rollouts/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None

    project_token_revoke(user=run.project.owner, token=token)
    response = bearer(key).get(f"/api/runs/{run.id}/rollouts/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"
    assert bearer("rs_" + "x" * 40).get(f"/api/runs/{run.id}/rollouts/").status_code == 401


def test_a_project_token_used_on_another_projects_run_is_forbidden_even_if_its_creator_could():
    run = external_run()
    other_project = project_factory(owner=run.project.owner)  # the creator is an editor there too
    _, key = project_token_create(user=run.project.owner, project=other_project, name="other")
    for method, path in (("get", f"/api/runs/{run.id}/rollouts/"), ("post", f"/api/runs/{run.id}/rollouts/groups/"),
                         ("post", f"/api/runs/{run.id}/openai/v1/chat/completions"),
                         ("get", f"/api/runs/{run.id}/openai/v1/models")):
        assert getattr(bearer(key), method)(path, {}, format="json").status_code == 403, path


def test_user_tokens_work_for_editors_only_and_non_members_never_learn_the_run_exists():
    run = external_run()
    editor = member_factory(project=run.project, role=Role.EDITOR)
    viewer = member_factory(project=run.project, role=Role.VIEWER)
    stranger = project_factory().owner
    path = f"/api/runs/{run.id}/rollouts/"
    assert user_client(editor).get(path).status_code == 200
    assert bearer(Token.objects.get(user=editor).key).get(path).status_code == 200  # an OpenAI client's header
    assert user_client(viewer).get(path).status_code == 403
    assert user_client(stranger).get(path).status_code == 404
    assert APIClient().get(path).status_code == 401


def test_only_editors_make_tokens_and_the_project_page_lists_them_without_their_keys(client):
    project = project_factory()
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(project.owner)
    response = client.post(f"/projects/{project.id}/tokens/", {"name": "ci runner"})
    assert response.status_code == 200
    key = response.context["new_key"]
    assert key.startswith("rs_") and key in response.content.decode()  # shown this once
    client.force_login(viewer)
    page = client.get(f"/projects/{project.id}/tokens/").content.decode()
    assert "ci runner" in page and key[:8] in page and key not in page
    assert client.post(f"/projects/{project.id}/tokens/", {"name": "mine"}).status_code == 403


# --- the state endpoint -------------------------------------------------------------------------------------


def test_the_state_endpoint_names_the_open_step_its_scenarios_and_what_was_submitted():
    run = external_run()
    client = user_client(run.project.owner)
    path = f"/api/runs/{run.id}/rollouts/"
    before = client.get(path).json()
    assert (before["step"], before["model"], before["deadline_s"], before["groups"]) == (None, None, None, [])
    model = open_step(run, timeout_s=300)
    recorded(run, "t1", "four", model=model, group=1)
    recorded(run, "t2", "five", model=model, group=1)
    assert submit(client, run, {"step": 1, "group_index": 1, "trajectories": [{"id": "t1"}, {"id": "t2"}]}
                  ).status_code == 201
    state = client.get(path).json()
    assert state["step"] == 1 and state["model"] == model and state["status"] == "running"
    assert 290 < state["deadline_s"] <= 300 and state["timeout_s"] == 300 and state["group_size"] == 2
    assert state["openai_base_url"] == f"http://testserver/api/runs/{run.id}/openai/v1"
    assert [(g["group_index"], g["scenario"]["user_message"], g["submitted"]) for g in state["groups"]] == [
        (0, "Question 1?", False), (1, "Question 2?", True)]
    assert "reference" not in json.dumps(state)
    # Where the run's server listens stays on the server: not in the state, nor in the event pages are sent.
    assert "127.0.0.1:9" not in json.dumps(state)
    assert "base_url" not in RunEvent.objects.get(run=run, kind="rollouts_wanted").as_message()["data"]

    run_event_ingest(run_id=run.id, event={"kind": "rollouts_closed", "step": 1, "received": [1], "missing": [0]})
    assert client.get(path).json()["step"] is None
    assert RunEvent.objects.filter(run=run, kind="rollouts_closed").get().payload["missing"] == [0]


def test_the_deadline_does_not_count_time_the_run_spent_paused():
    from webapp.services.runs import run_pause

    run = external_run()
    open_step(run, timeout_s=100)
    wanted = RunEvent.objects.get(run=run, kind="rollouts_wanted")
    RunEvent.objects.filter(pk=wanted.pk).update(created_at=wanted.created_at - timedelta(seconds=30))
    run_pause(user=run.project.owner, run=run)
    state = user_client(run.project.owner).get(f"/api/runs/{run.id}/rollouts/").json()
    assert state["status"] == "paused" and 69 < state["deadline_s"] <= 70.5


# --- submission refusals ------------------------------------------------------------------------------------


@pytest.fixture
def step_one():
    run = external_run()
    model = open_step(run)
    return run, model, user_client(run.project.owner)


def test_a_malformed_submission_is_a_400_naming_the_field(step_one):
    run, model, client = step_one
    for body, field in (({"step": 1, "group_index": 0}, "trajectories"),
                        ({"step": 1, "group_index": 0, "trajectories": []}, "trajectories"),
                        ({"step": 1, "group_index": 0, "trajectories": [{"id": "no spaces"}]}, "trajectories"),
                        ({"step": 1, "group_index": 7, "trajectories": [{"id": "a"}]}, "group_index"),
                        ({"step": 1, "group_index": 0, "trajectories": [{"id": "a"}, {"id": "a"}]}, "trajectories"),
                        ({"step": 1, "group_index": 0, "trajectories": [
                            {"id": "a", "messages": [{"role": "robot", "content": "x"}]}]}, "trajectories"),
                        ({"step": 1, "group_index": 0, "trajectories": [{"id": "a", "messages": []}]}, "trajectories"),
                        ({"step": 1, "group_index": 0, "trajectories": [{"id": "a", "messages": [
                            {"role": "assistant", "tool_calls": [{"function": "f"}]}]}]}, "trajectories")):
        response = submit(client, run, body)
        assert response.status_code == 400 and field in response.json() and response.json()["detail"], body


def test_an_oversized_submission_is_a_413(step_one, settings):
    run, model, client = step_one
    too_many = [{"id": f"t{i}"} for i in range(3)]  # the group size is 2
    response = submit(client, run, {"step": 1, "group_index": 0, "trajectories": too_many})
    assert response.status_code == 413 and "at most 2" in response.json()["detail"]
    settings.STUDIO_EXTERNAL_MAX_MESSAGES = 3
    long = [{"role": "user", "content": "hi"}] * 4
    assert submit(client, run, {"step": 1, "group_index": 0, "trajectories": [{"id": "a", "messages": long}]}
                  ).status_code == 413
    settings.STUDIO_EXTERNAL_MAX_BYTES = 1024
    big = {"step": 1, "group_index": 0, "trajectories": [{"id": "a", "metadata": {"notes": "x" * 2000}}]}
    response = submit(client, run, big)
    assert response.status_code == 413 and "STUDIO_EXTERNAL_MAX_BYTES" in response.json()["detail"]
    assert not ExternalGroup.objects.exists()


def test_a_step_that_is_not_open_a_group_sent_twice_a_reused_id_and_a_stale_adapter_are_409s(step_one):
    run, model, client = step_one
    recorded(run, "a1", "four", model=model)
    recorded(run, "a2", "five", model=model)
    assert submit(client, run, {"step": 2, "group_index": 0, "trajectories": [{"id": "a1"}]}).status_code == 409
    assert submit(client, run, {"step": 1, "group_index": 0, "trajectories": [{"id": "a1"}, {"id": "a2"}]}
                  ).status_code == 201
    again = submit(client, run, {"step": 1, "group_index": 0, "trajectories": [{"id": "a1"}]})
    assert again.status_code == 409 and "submitted already" in again.json()["detail"]
    reused = submit(client, run, {"step": 1, "group_index": 1, "trajectories": [{"id": "a1"}]})
    assert reused.status_code == 409 and "a1" in reused.json()["detail"]
    recorded(run, "old", "six", model="someone-else@0", group=1)
    stale = submit(client, run, {"step": 1, "group_index": 1, "trajectories": [{"id": "old"}]})
    assert stale.status_code == 409 and "someone-else@0" in stale.json()["detail"]
    assert ExternalGroup.objects.filter(run=run).count() == 1


def test_a_turn_the_model_never_sampled_is_a_422_unless_the_run_allows_it():
    run = external_run()
    model = open_step(run)
    client = user_client(run.project.owner)
    recorded(run, "f1", "four", model=model)
    forged = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Question 1?"},
              {"role": "assistant", "content": "the perfect answer"}]
    response = submit(client, run, {"step": 1, "group_index": 0, "trajectories": [{"id": "f1", "messages": forged}]})
    assert response.status_code == 422 and "message 2" in response.json()["detail"]

    lenient = external_run()
    open_step(lenient, allow_unsampled=True)
    response = submit(user_client(lenient.project.owner), lenient,
                      {"step": 1, "group_index": 0, "trajectories": [{"id": "f1", "messages": forged}]})
    assert response.status_code == 201
    assert ExternalGroup.objects.get(run=lenient).trajectories[0]["turn_token_ids"] == [None]


def test_a_run_without_a_judge_needs_the_clients_rewards():
    run = external_run(judge=False)
    model = open_step(run)
    recorded(run, "r1", "four", model=model)
    client = user_client(run.project.owner)
    response = submit(client, run, {"step": 1, "group_index": 0, "trajectories": [{"id": "r1"}]})
    assert response.status_code == 400 and "reward" in response.json()["trajectories"][0]
    assert submit(client, run, {"step": 1, "group_index": 0, "trajectories": [{"id": "r1", "reward": 0.5}]}
                  ).status_code == 201
    assert ExternalGroup.objects.get(run=run).trajectories[0]["env_reward"] == 0.5


# --- the endpoint, in front of a real inference server --------------------------------------------------------


@pytest.fixture(scope="module")
def inference_server(tiny_model_dir):
    """The project's own local inference server on the tiny model, serving it as `tiny@0`, requiring the
    deployment's token as a worker's engine starts it (so every call through the endpoint must carry it)."""
    from django.conf import settings

    from tests.webapp.world import free_port

    port = free_port()
    token = settings.STUDIO_INFERENCE_TOKEN
    proc = subprocess.Popen([sys.executable, "-m", "training.servers.local", "--model", str(tiny_model_dir),
                             "--served-model-name", "tiny@0", "--port", str(port), "--threads", "1"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "STUDIO_INFERENCE_TOKEN": token})

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1,
                             headers={"Authorization": f"Bearer {token}"}).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout=120, message="the local inference server")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_calls_through_the_endpoint_are_recorded_and_the_group_trains_on_the_sampled_tokens(inference_server,
                                                                                          live_server):
    run = external_run()
    model = open_step(run, model="tiny@0", base_url=inference_server)
    _, key = project_token_create(user=run.project.owner, project=run.project, name="agent")
    state = httpx.get(f"{live_server.url}/api/runs/{run.id}/rollouts/",
                      headers={"Authorization": f"Bearer {key}"}).json()
    assert state["openai_base_url"] == f"{live_server.url}/api/runs/{run.id}/openai/v1"
    client = openai.OpenAI(base_url=state["openai_base_url"], api_key=key, max_retries=0,
                           default_headers={"X-Client-Id": "laptop-1"})
    assert [m.id for m in client.models.list().data][0] == "tiny@0"
    question = [{"role": "system", "content": state["system_prompt"]},
                {"role": "user", "content": state["groups"][0]["scenario"]["user_message"]}]
    plain = client.chat.completions.create(model=model, messages=question, max_tokens=6,
                                           extra_headers={"X-Trajectory-Id": "traj-a"})
    assert plain.choices[0].logprobs is None  # not asked for: an ordinary answer, though the call keeps them
    streamed = client.chat.completions.create(model=model, messages=question, max_tokens=6, stream=True,
                                              extra_headers={"X-Trajectory-Id": "traj-b"})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    client.chat.completions.create(model=model, messages=question, max_tokens=3)  # no id: served, not recorded

    calls = {c.trajectory_key: c for c in ExternalCall.objects.filter(run=run)}
    assert sorted(calls) == ["traj-a", "traj-b"]
    assert calls["traj-a"].choices[0]["message"]["content"] == plain.choices[0].message.content
    assert calls["traj-b"].choices[0]["message"]["content"] == text
    for call in calls.values():
        choice = call.choices[0]
        assert choice["token_ids"] and len(choice["logprobs"]) == len(choice["token_ids"]) == call.completion_tokens

    response = httpx.post(f"{live_server.url}/api/runs/{run.id}/rollouts/groups/",
                          headers={"Authorization": f"Bearer {key}", "X-Client-Id": "laptop-1"},
                          json={"step": 1, "group_index": 0, "trajectories": [
                              {"id": "traj-a", "reward": 0.25, "metadata": {"tries": 1}}, {"id": "traj-b"}]})
    assert response.status_code == 201, response.text
    assert response.json() == {"step": 1, "group_index": 0, "trajectories": 2}
    group = ExternalGroup.objects.get(run=run)
    assert [t["turn_token_ids"][0] for t in group.trajectories] == [
        calls["traj-a"].choices[0]["token_ids"], calls["traj-b"].choices[0]["token_ids"]]
    assert [t["turn_logprobs"][0] for t in group.trajectories] == [
        calls["traj-a"].choices[0]["logprobs"], calls["traj-b"].choices[0]["logprobs"]]
    assert group.trajectories[0]["metadata"] == {"tries": 1, "trajectory_id": "traj-a"}
    assert group.token is not None and group.forwarded_at is None
    client_row = run.external_clients.get()
    assert (client_row.client_id, client_row.requests) == ("laptop-1", 5)  # models, three completions, the submission
    assert list(RunEvent.objects.filter(run=run, kind__in=["rollouts_client", "rollouts_submitted"])
                .values_list("kind", flat=True)) == ["rollouts_client", "rollouts_submitted"]


@pytest.mark.django_db(transaction=True)
def test_the_endpoint_answers_409_before_the_run_serves_and_passes_the_servers_errors_through(inference_server,
                                                                                              live_server):
    run = external_run()
    headers = {"Authorization": f"Token {Token.objects.create(user=run.project.owner).key}"}
    url = f"{live_server.url}/api/runs/{run.id}/openai/v1/chat/completions"
    body = {"model": "tiny@0", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    refused = httpx.post(url, headers=headers, json=body)
    assert refused.status_code == 409 and "not serving" in refused.json()["detail"]
    open_step(run, model="tiny@0", base_url=inference_server)
    unknown = httpx.post(url, headers=headers, json={**body, "model": "no-such-adapter"})
    assert unknown.status_code == 400 and "model" in unknown.json()  # only the run's own adapters are served
    assert httpx.post(url, headers=headers, content=b"{not json").status_code == 400
    hotter = httpx.post(url, headers=headers, json={**body, "temperature": 0.25})  # training assumes the run's
    assert hotter.status_code == 400 and "temperature 1" in hotter.json()["temperature"][0]
    assert httpx.post(url, headers={**headers, "X-Trajectory-Id": "bad id!"}, json=body).status_code == 400
    with pytest.MonkeyPatch.context() as patch:
        from django.conf import settings

        patch.setattr(settings, "STUDIO_EXTERNAL_MAX_BYTES", 1024)
        assert httpx.post(url, headers=headers, json={**body, "stop": ["x" * 2000]}).status_code == 413
    run.status = RunStatus.COMPLETED
    run.save(update_fields=["status"])
    assert httpx.post(url, headers=headers, json=body).status_code == 409
    assert not ExternalCall.objects.exists()


# --- the runner ---------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_runner_sends_submitted_groups_to_the_engine_and_all_of_them_again_when_an_engine_starts(settings):
    from webapp.execution.runner import run_execute

    settings.STUDIO_ENGINE = "tests.webapp.external_engine:train"
    run = external_run(status=RunStatus.QUEUED, steps=2)
    name = run.config["name"]
    # A group an earlier engine was sent for step 1, before the worker died: the new engine must get it too.
    early = ExternalGroup.objects.create(run=run, step=1, group_index=0, forwarded_at="2026-01-01T00:00:00Z",
                                         trajectories=[{"scenario_id": "s1", "messages": [], "turn_token_ids": [[1]]}])
    def work() -> None:
        try:
            run_execute(run_id=run.id, worker="w")
        finally:
            connection.close()  # the thread's own connection, or the test database cannot be dropped

    worker = threading.Thread(target=work)
    worker.start()
    try:
        wait_for(lambda: RunEvent.objects.filter(run=run, kind="rollouts_wanted", payload__step=2).exists(),
                 timeout=60, message="step 2's rollouts_wanted")
        recorded(run, "s2a", "four", model=f"{name}@1", token_ids=(7, 8, 9), step=2)
        response = submit(user_client(run.project.owner), run,
                          {"step": 2, "group_index": 0, "trajectories": [{"id": "s2a"}]})
        assert response.status_code == 201, response.content
    finally:
        worker.join(timeout=60)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, run.error
    received = json.loads((Path(run.output_dir) / "received.json").read_text())
    assert received["1"] == early.trajectories
    assert [t["turn_token_ids"] for t in received["2"]] == [[[7, 8, 9]]]
    assert all(g.forwarded_at is not None for g in ExternalGroup.objects.filter(run=run))
    phases = list(RunEvent.objects.filter(run=run, kind="rollouts_closed").values_list("payload__received", flat=True))
    assert phases == [[0], [0]]


# --- the agent form -----------------------------------------------------------------------------------------


def test_an_agent_can_roll_out_in_your_own_code_with_its_options_checked(client):
    from webapp.models import Agent

    project = project_factory()
    client.force_login(project.owner)
    form = {"name": "mine", "base_model": "tiny-2048", "environment_kind": "external", "temperature": 1,
            "top_p": 1, "max_tokens": 64}
    bad = client.post(f"/projects/{project.id}/agents/new/", {**form, "environment_options": '{"on_missing": "wait"}'})
    assert bad.status_code == 400 and "on_missing" in bad.content.decode()
    assert "Your own code (external rollouts)" in bad.content.decode()
    good = client.post(f"/projects/{project.id}/agents/new/", {**form, "environment_options": '{"group_timeout_s": 30}'})
    assert good.status_code == 302
    assert Agent.objects.get(project=project).environment_options == {
        "group_timeout_s": 30.0, "on_missing": "skip", "allow_unsampled": False, "upstream_timeout_s": None}
    # the API goes through the same check
    response = user_client(project.owner).post("/api/agents/", {
        "project": project.id, "name": "api", "base_model": "tiny-2048", "environment_kind": "external",
        "environment_options": {"group_timeout_s": -1}}, format="json")
    assert response.status_code == 400 and "group_timeout_s" in str(response.json()["environment_options"])


def test_an_external_agent_launches_without_a_judge_and_with_one(judge_double):
    from webapp.services.runs import run_launch
    from tests.webapp.factories import scenario_set_factory

    project = project_factory()
    agent = agent_factory(project=project, environment_kind="external", environment_options={})
    judge_double.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                   {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})  # launch's test
    for judge in (None, judge_factory(project=project, api_base=judge_double.api_base)):
        run = run_launch(user=project.owner, project=project, name=f"ext-{judge is not None}", agent=agent,
                         scenario_set=scenario_set_factory(project=project), judge_config=judge, steps=1,
                         group_size=2, groups_per_step=1, learning_rate=1e-5)
        assert run.config["environment"]["kind"] == "external"


# --- the docs -----------------------------------------------------------------------------------------------


def test_the_api_docs_name_the_external_rollouts_endpoints_and_the_schema_documents_their_refusals(client):
    page = client.get("/api/docs/").content.decode()
    assert "/api/runs/{id}/rollouts/groups/" in page and "X-Trajectory-Id" in page and "Bearer rs_" in page
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    submit_op = schema["paths"]["/api/runs/{id}/rollouts/groups/"]["post"]
    assert {"201", "400", "401", "403", "404", "409", "413", "422"} <= set(submit_op["responses"])
    assert "/api/runs/{id}/rollouts/" in schema["paths"]
    assert not [p for p in schema["paths"] if "openai" in p]  # OpenAI's own API, documented in words
    assert "External rollouts" in schema["info"]["description"]


# --- end to end: the real engine, the runner, the endpoint and the API --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_agent_in_your_own_code_trains_a_run_on_the_tiny_model_through_the_web_app(tiny_model_dir, live_server,
                                                                                    settings):
    """The user's process (played here with the plain openai client and httpx) reads each step, samples through
    the run's endpoint, submits its groups with its own rewards (no judge); the real engine trains them."""
    from webapp.execution.runner import run_execute
    from webapp.models import Step, TrajectoryGroup

    settings.STUDIO_ENGINE = "training:train"
    project = project_factory()
    agent = agent_factory(project=project, base_model=TEST_TINY_MODEL, environment_kind="external",
                          environment_options={"group_timeout_s": 120, "on_missing": "fail"}, max_tokens=6)
    run = run_factory(project=project, agent=agent, steps=2,
                      overrides={"grpo": {"groups_per_step": 1}})
    _, key = project_token_create(user=project.owner, project=project, name="e2e")
    headers = {"Authorization": f"Bearer {key}", "X-Client-Id": "e2e"}

    def work() -> None:
        try:
            run_execute(run_id=run.id, worker="w")
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    submitted = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            state = httpx.get(f"{live_server.url}/api/runs/{run.id}/rollouts/", headers=headers).json()
            if state["status"] in ("completed", "failed", "cancelled", "crashed"):
                break
            todo = [g for g in state["groups"] if not g["submitted"]]
            if state["step"] is None or not todo:
                time.sleep(0.2)
                continue
            client = openai.OpenAI(base_url=state["openai_base_url"], api_key=key, max_retries=0,
                                   default_headers={"X-Client-Id": "e2e"})
            for group in todo:
                trajectories = []
                for k in range(state["group_size"]):
                    trajectory_id = f"s{state['step']}-g{group['group_index']}-{k}"
                    client.chat.completions.create(
                        model=state["model"], max_tokens=6, extra_headers={"X-Trajectory-Id": trajectory_id},
                        messages=[{"role": "system", "content": state["system_prompt"]},
                                  {"role": "user", "content": group["scenario"]["user_message"]}])
                    trajectories.append({"id": trajectory_id, "reward": float(k)})
                response = httpx.post(f"{live_server.url}/api/runs/{run.id}/rollouts/groups/", headers=headers,
                                      json={"step": state["step"], "group_index": group["group_index"],
                                            "trajectories": trajectories})
                assert response.status_code == 201, response.text
                submitted.append((state["step"], state["model"]))
    finally:
        worker.join(timeout=120)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, run.error + (Path(run.output_dir) / "engine.log").read_text()[-3000:]
    name = run.config["name"]
    # each step sampled with what it asked for: the base model, then step 1's adapter
    assert submitted == [(1, "base"), (2, f"{name}@1")]
    assert sorted(Step.objects.filter(run=run).values_list("index", flat=True)) == [1, 2]
    for group in TrajectoryGroup.objects.filter(run=run):
        assert sorted(t.env_reward for t in group.trajectories.all()) == [0.0, 1.0]
    assert run.checkpoints.count() == 2
    assert all(g.forwarded_at for g in ExternalGroup.objects.filter(run=run))


def test_the_endpoint_says_so_when_the_runs_server_does_not_answer():
    run = external_run()
    open_step(run, base_url=f"http://127.0.0.1:{closed_port()}/v1")
    response = user_client(run.project.owner).post(
        f"/api/runs/{run.id}/openai/v1/chat/completions", {"messages": [
            {"role": "system", "content": "Answer."}, {"role": "user", "content": "Question 1?"}]},
        format="json", HTTP_X_TRAJECTORY_ID="t1")
    assert response.status_code == 502 and "did not answer" in response.json()["detail"]
    assert not ExternalCall.objects.exists()


def test_a_browser_session_cannot_be_made_to_sample_or_submit_from_another_site():
    from django.test import Client

    run = external_run()
    open_step(run)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(run.project.owner)
    for path in (f"/api/runs/{run.id}/openai/v1/chat/completions", f"/api/runs/{run.id}/rollouts/groups/"):
        response = browser.post(path, {"messages": []}, content_type="application/json")
        assert response.status_code == 403 and "CSRF" in response.json()["detail"], path
    assert browser.get(f"/api/runs/{run.id}/rollouts/").status_code == 200  # reading needs no CSRF token


def test_an_external_agents_checkpoints_are_not_offered_an_evaluation_the_worker_cannot_run(client):
    from django.core.exceptions import ValidationError

    from webapp.models import Checkpoint
    from webapp.services.monitoring import run_evaluate

    run = external_run(status=RunStatus.COMPLETED,
                       overrides={"evaluation": {"held_out_fraction": 0.5, "every": 1}})
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path="unused", adapter_name="r@1")
    with pytest.raises(ValidationError, match="runs in your process"):
        run_evaluate(user=run.project.owner, run=run, checkpoint=checkpoint)
    client.force_login(run.project.owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert "evaluate now" not in page and "No held-out evaluation: the agent" in page
    assert "evaluate now" not in client.get(f"/runs/{run.id}/checkpoint-table/").content.decode()


def test_a_worker_with_an_engine_host_starts_an_external_agents_server_there_and_leaves_the_run_as_frozen(settings):
    from webapp.execution.runner import _engine_config

    run, other = external_run(), run_factory()
    assert _engine_config(run.config)["server"].get("host", "127.0.0.1") == "127.0.0.1"  # unset: the run's own
    settings.STUDIO_ENGINE_HOST = "0.0.0.0"
    assert _engine_config(run.config)["server"]["host"] == "0.0.0.0"
    assert _engine_config(other.config) is other.config  # only external agents are reached from the web app
    run.refresh_from_db()
    assert run.config["server"].get("host", "127.0.0.1") == "127.0.0.1"


def test_an_earlier_steps_checkpoint_is_served_by_its_name_and_an_unknown_name_is_the_servers_404(
        inference_server, live_server, tiny_model_dir, tmp_path):
    from training.config import GRPOConfig, LoraConfig
    from training.rl.trainer import Trainer
    from webapp.models import Checkpoint

    run = external_run()
    open_step(run, step=3, model="tiny@0", base_url=inference_server)
    Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(), seed=0).save(tmp_path / "step-1", {"step": 1})
    name = f"{run.config['name']}@1"
    Checkpoint.objects.create(run=run, step_index=1, path=str(tmp_path / "step-1"), adapter_name=name)
    headers = {"Authorization": f"Token {Token.objects.create(user=run.project.owner).key}"}
    url = f"{live_server.url}/api/runs/{run.id}/openai/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for _ in range(2):  # loaded by the first request, served as it is by the second
        answer = httpx.post(url, headers=headers, json={**body, "model": name}, timeout=60)
        assert answer.status_code == 200 and answer.json()["model"] == name, answer.text
    assert httpx.post(url, headers=headers, json={**body, "model": f"{run.config['name']}@7"}).status_code == 400


def test_the_endpoint_sends_the_deployments_token_to_the_runs_own_server_and_never_to_an_external_one():
    """An `external` server's URL is not the deployment's: the token that opens the workers' servers stays home."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from django.conf import settings

    seen: list[str | None] = []

    class Upstream(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        for kind in ("local", "external"):
            run = external_run()
            url = f"http://127.0.0.1:{upstream.server_port}/v1"  # an external server is the run's server.url
            run.config = {**run.config, "server": {**run.config.get("server", {}), "kind": kind,
                                                   **({"url": url} if kind == "external" else {})}}
            run.save(update_fields=["config"])
            open_step(run, base_url=url)
            user_client(run.project.owner).post(f"/api/runs/{run.id}/openai/v1/chat/completions",
                                                {"messages": [{"role": "user", "content": "hi"}]}, format="json")
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert seen == [f"Bearer {settings.STUDIO_INFERENCE_TOKEN}", None]
