"""Who may see and do what: non-members get 404 everywhere, viewers look but cannot launch or control."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import (
    agent_factory, judge_factory, member_factory, project_factory, run_factory, scenario_set_factory, user_factory,
)
from webapp.live.ingest import run_event_ingest
from webapp.models import Role, Run, RunStatus, Trajectory
from webapp.services import runs as run_services
from webapp.services.run_config import run_config_build

pytestmark = pytest.mark.django_db


def _api(user) -> APIClient:
    from rest_framework.authtoken.models import Token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def _scored_run(content: str) -> tuple[Run, Trajectory]:
    run = run_factory(status=RunStatus.RUNNING)
    trajectory = {"scenario_id": "s1", "messages": [{"role": "user", "content": "hi"},
                                                    {"role": "assistant", "content": content}],
                  "reward": 0.5, "explanation": content, "criteria": {}, "metadata": {}}
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
                                           "trajectories": [trajectory, {**trajectory, "reward": 0.1}],
                                           "reward_mean": 0.3, "reward_std": 0.2, "skipped": False})
    return run, Trajectory.objects.filter(group__run=run).order_by("rank").first()


def test_a_non_member_gets_404_from_every_page_of_a_project(client):
    run, trajectory = _scored_run("hello")
    client.force_login(user_factory())
    for url in [reverse("project-detail", args=[run.project_id]), reverse("run-detail", args=[run.id]),
                reverse("run-list", args=[run.project_id]), reverse("trajectory-detail", args=[trajectory.id]),
                reverse("group-detail", args=[trajectory.group_id]), reverse("agent-edit", args=[run.agent_id]),
                reverse("scenario-set-detail", args=[run.scenario_set_id])]:
        assert client.get(url).status_code == 404, url
    assert client.post(reverse("run-control", args=[run.id, "pause"])).status_code == 404


def test_a_non_member_gets_404_from_the_api_and_sees_nothing_in_lists():
    run, trajectory = _scored_run("hello")
    api = _api(user_factory())
    for url in [f"/api/projects/{run.project_id}/", f"/api/runs/{run.id}/", f"/api/runs/{run.id}/groups/",
                f"/api/runs/{run.id}/steps/", f"/api/trajectories/{trajectory.id}/", f"/api/agents/{run.agent_id}/"]:
        assert api.get(url).status_code == 404, url
    assert api.post(f"/api/runs/{run.id}/cancel/").status_code == 404
    assert api.get("/api/runs/").json()["results"] == []


def test_an_anonymous_visitor_is_sent_to_the_login_page_and_the_api_refuses_them(client):
    run = run_factory()
    response = client.get(reverse("run-detail", args=[run.id]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert APIClient().get("/api/runs/").status_code == 401


def test_a_viewer_sees_the_run_but_cannot_launch_or_control_it(client):
    run = run_factory(status=RunStatus.RUNNING)
    viewer = member_factory(project=run.project, role=Role.VIEWER)
    client.force_login(viewer)
    page = client.get(reverse("run-detail", args=[run.id]))
    assert page.status_code == 200 and b'id="pause"' not in page.content
    assert client.post(reverse("run-control", args=[run.id, "pause"])).status_code == 403
    assert client.get(reverse("run-launch", args=[run.project_id])).status_code == 403
    api = _api(viewer)
    assert api.post(f"/api/runs/{run.id}/pause/").status_code == 403
    launch = api.post("/api/runs/", {"project": run.project_id, "name": "x", "agent": run.agent_id,
                                     "scenario_set": run.scenario_set_id}, format="json")
    assert launch.status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and Run.objects.count() == 1


def test_an_editor_pauses_and_resumes_through_the_api():
    run = run_factory(status=RunStatus.RUNNING)
    api = _api(run.project.owner)
    assert api.post(f"/api/runs/{run.id}/pause/").json()["status"] == "paused"
    assert api.post(f"/api/runs/{run.id}/resume/").json()["status"] == "running"
    assert api.post(f"/api/runs/{run.id}/resume/").status_code == 400  # a running run cannot be resumed


def test_a_script_tag_in_model_output_renders_as_text_everywhere(client):
    payload = '<script>alert("pwned")</script>'
    run, trajectory = _scored_run(payload)
    client.force_login(run.project.owner)
    for url in [reverse("run-detail", args=[run.id]), reverse("trajectory-detail", args=[trajectory.id]),
                reverse("group-detail", args=[trajectory.group_id])]:
        html = client.get(url).content.decode()
        assert payload not in html, url
        assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html, url


def test_a_stored_judge_key_is_encrypted_and_never_shown_back(client):
    project = project_factory()
    client.force_login(project.owner)
    response = client.post(reverse("judge-create", args=[project.id]), {
        "name": "gpt", "model": "openai/gpt-4o-mini", "api_key": "sk-very-secret-123", "temperature": 0,
        "passes": 1, "concurrency": 4})
    assert response.status_code == 302
    judge = project.judge_configs.get()
    assert "sk-very-secret-123" not in judge.api_key_encrypted and judge.has_stored_key
    form = client.get(reverse("judge-edit", args=[judge.id])).content.decode()
    assert "sk-very-secret-123" not in form and judge.api_key_encrypted not in form
    assert "sk-very-secret-123" not in str(_api(project.owner).get(f"/api/judge-configs/{judge.id}/").json())


def test_a_judge_key_variable_must_be_an_api_key_so_the_servers_own_secrets_stay_home(client, settings):
    settings.STUDIO_JUDGE_KEY_ENDPOINTS = {"OPENAI_API_KEY": ("",)}
    project = project_factory()
    client.force_login(project.owner)
    form = {"name": "j", "model": "openai/gpt-4o-mini", "temperature": 0, "passes": 1, "concurrency": 4}
    for name in ("SECRET_KEY", "DATABASE_URL", "openai_api_key"):
        response = client.post(reverse("judge-create", args=[project.id]), {**form, "api_key_env": name})
        assert response.status_code == 400 and b"Select a valid choice" in response.content, name
    assert not project.judge_configs.exists()
    ok = client.post(reverse("judge-create", args=[project.id]), {**form, "api_key_env": "OPENAI_API_KEY"})
    assert ok.status_code == 302 and project.judge_configs.get().api_key_env == "OPENAI_API_KEY"


# The overrides are refused by the allow-list (webapp/run_policy.py; every key: tests/security/); an agent's own
# custom tools still name code the worker imports, so they stay limited to STUDIO_TOOL_MODULES.
@pytest.mark.parametrize("overrides, agent_options, problem", [
    ({"server": {"kind": "vllm", "python": "/bin/sh"}}, {}, "server.python cannot be set here"),
    ({"server": {"kind": "vllm", "extra_args": ["--help"]}}, {}, "server.extra_args cannot be set here"),
    ({"scenarios_file": "/etc/hostname"}, {}, "scenarios_file cannot be set here"),
    ({"environment": {"kind": "tools", "options": {"custom_tools": [{"name": "sh", "function": "os:system"}]}}}, {},
     "environment.options.custom_tools cannot be set here"),
    (None, {"custom_tools": [{"name": "sh", "function": "os:system"}]},
     "custom tool 'os' is not in a module the worker allows"),
])
def test_an_editor_cannot_point_a_run_at_the_workers_files_interpreters_or_code(overrides, agent_options, problem):
    project = project_factory()
    agent = agent_factory(project=project, environment_kind="tools" if agent_options else "chat",
                          environment_options=agent_options)
    scenario_set = scenario_set_factory(project=project)
    with pytest.raises(ValidationError) as err:
        run_services.run_launch(user=project.owner, project=project, name="r", agent=agent, scenario_set=scenario_set,
                                steps=1, group_size=2, groups_per_step=1, learning_rate=1e-4, overrides=overrides)
    assert problem in str(err.value)
    assert not Run.objects.exists()


def test_custom_tools_from_a_module_the_worker_allows_are_accepted(settings):
    settings.STUDIO_TOOL_MODULES = ["json"]
    project = project_factory()
    agent = agent_factory(project=project, environment_kind="tools", environment_options={
        "custom_tools": [{"name": "echo", "function": "json:dumps"}]})
    config = run_config_build(name="r", agent=agent, scenario_set=scenario_set_factory(project=project),
                              rubric_version=None, judge=None, steps=1, group_size=2, groups_per_step=1,
                              learning_rate=1e-4, seed=0, overrides=None)
    assert config["environment"]["options"]["custom_tools"][0]["function"] == "json:dumps"


def test_the_engine_process_gets_none_of_the_web_apps_secrets(monkeypatch):
    from webapp.execution.runner import engine_env

    for name, value in {"SECRET_KEY": "s" * 40, "STUDIO_ENCRYPTION_KEY": "k", "DATABASE_URL": "postgres://x/y",
                        "REDIS_URL": "redis://x", "OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-2"}.items():
        monkeypatch.setenv(name, value)
    project = project_factory()
    env = engine_env(run_factory(project=project,
                                 judge_config=judge_factory(project=project, api_key_env="OPENAI_API_KEY")))
    assert not {"SECRET_KEY", "STUDIO_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL"} & set(env)
    assert env["OPENAI_API_KEY"] == "sk-1"  # the judge's key variable does reach the engine
    assert "ANTHROPIC_API_KEY" not in env  # other keys stay home: litellm would find them by provider
