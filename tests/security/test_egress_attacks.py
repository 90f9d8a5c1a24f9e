"""Issue 43, part 2, as the attacker does it: an ordinary account creates its own project and points a judge, a
distillation teacher or the scenario generator's judge at an address inside the deployment (the cloud metadata
endpoint, loopback, 0.0.0.0, a name resolving to a private address), or at a server that redirects there, or at a
name that passes the check and is rebound afterwards. Each is refused on save (400 naming the field, nothing
stored) and again at the connection, which goes to the address that was checked; the local HTTP double standing
in for the metadata endpoint receives nothing. A teacher whose server fails reports its HTTP status, never the
reply's body. Control: an allowed loopback judge still answers end to end through litellm and the pinned transport.
The resolver is faked at socket.getaddrinfo (outside our code); every server is real HTTP."""
from __future__ import annotations

import asyncio
import socket

import pytest

from tests.egress.http_doubles import CountingServer, rebinding_resolver
from tests.judge_double import JudgeDouble, judge_double  # noqa: F401  (fixture)
from tests.security.overrides_helpers import api_as, page_as
from tests.webapp.conftest import inprocess_executor  # noqa: F401  (fixture)
from tests.webapp.factories import agent_factory, dataset_factory, judge_factory, user_factory
from webapp.execution.executors import wait_idle
from webapp.models import Distillation, JudgeConfig, Project, Scenario, ScenarioSet
from webapp.services.secrets import secret_encrypt

KEYS = ("SecretAccessKey", "AccessKeyId", "wJalrXUtnFEMI")


@pytest.fixture
def attacker(db):
    """An ordinary account (no staff, no membership anywhere) with the project it created itself."""
    user = user_factory()
    created = api_as(user).post("/api/projects/", {"name": "my own project"}, format="json")
    assert created.status_code == 201, created.content
    return user, Project.objects.get(pk=created.json()["id"])


@pytest.fixture
def no_loopback(settings):
    """A shared deployment that lists no loopback or private host."""
    settings.STUDIO_EGRESS_ALLOWED_HOSTS = []
    settings.STUDIO_MCP_ALLOWED_HOSTS = []
    return settings


ADDRESSES = [
    ("http://169.254.169.254/latest/meta-data/", "never allowed"),
    ("http://[::ffff:169.254.169.254]/latest/meta-data/", "never allowed"),
    ("http://127.0.0.1:8000/v1", "loopback or private"),
    ("http://0.0.0.0:8000/v1", "never allowed"),
    ("http://judge.attacker.test/v1", "10.0.0.7"),  # a public-looking name resolving to a private address
]


@pytest.fixture
def private_name(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver("judge.attacker.test", ["10.0.0.7"]))


@pytest.mark.parametrize("url, says", ADDRESSES)
def test_a_judge_or_teacher_api_base_inside_the_deployment_is_refused_on_save_by_api_and_form(
        attacker, no_loopback, private_name, url, says):
    user, project = attacker
    response = api_as(user).post("/api/judge-configs/", {"project": project.id, "name": "j", "model": "openai/x",
                                                         "api_base": url}, format="json")
    assert response.status_code == 400, response.content
    assert says in " ".join(response.json()["api_base"])
    page = page_as(user).post(f"/projects/{project.id}/judges/new/", {
        "name": "j", "model": "openai/x", "api_base": url, "temperature": 0, "passes": 1, "concurrency": 1})
    assert page.status_code == 400 and "this address is not allowed" in page.content.decode()
    judge = judge_factory(project=project, name="public", api_base="https://8.8.8.8/v1")
    response = api_as(user).patch(f"/api/judge-configs/{judge.id}/", {"api_base": url}, format="json")
    assert response.status_code == 400 and "api_base" in response.json(), response.content
    assert list(JudgeConfig.objects.filter(project=project).values_list("api_base", flat=True)) == [
        "https://8.8.8.8/v1"]  # nothing stored, nothing moved


def _stored_judge(project: Project, url: str, name: str = "stored") -> JudgeConfig:
    """A judge saved while its address was allowed (the list narrowed since): the row as the database has it."""
    return judge_factory(project=project, name=name, api_base=url, api_key_encrypted=secret_encrypt(plaintext="k"))


def test_a_stored_judge_at_a_refused_address_is_refused_by_test_judge_and_the_generator_and_sends_nothing(
        attacker, no_loopback):
    user, project = attacker
    scenario_set = ScenarioSet.objects.create(project=project, name="s")
    with CountingServer() as metadata:
        judge = _stored_judge(project, f"{metadata.url}/latest/meta-data")
        page = page_as(user).post(f"/judges/{judge.id}/test/").content.decode()
        assert 'data-ok="0"' in page and "may not send requests to this address" in page
        response = page_as(user).post(f"/scenario-sets/{scenario_set.id}/generate/", {
            "action": "draft", "task": "Answer questions", "n": 2, "judge": judge.id})
        assert response.status_code == 400
        assert "the judge&#x27;s API base: this address is not allowed" in response.content.decode()
        assert metadata.requests == []
    assert not Scenario.objects.filter(scenario_set=scenario_set).exists()


def _distillation_body(project: Project, judge: JudgeConfig, teacher: JudgeConfig) -> dict:
    scenario_set = ScenarioSet.objects.create(project=project, name="support")
    Scenario.objects.create(scenario_set=scenario_set, external_id="q0", user_message="refund policy?")
    agent = agent_factory(project=project, system_prompt="Answer the customer.", max_tokens=32)
    return {"project": project.id, "dataset": dataset_factory(project=project, rows=1).id, "agent": agent.id,
            "scenario_set": scenario_set.id, "judge_config": judge.id, "teacher": teacher.id,
            "answers_per_scenario": 2, "threshold": 0.5, "max_scenarios": 1}


def test_a_teacher_at_a_refused_address_is_refused_when_the_distillation_is_created(attacker, no_loopback):
    user, project = attacker
    judge = _stored_judge(project, "https://8.8.8.8/v1", name="judge")
    teacher = _stored_judge(project, "http://169.254.169.254/latest/meta-data", name="teacher")
    response = api_as(user).post("/api/distillations/", _distillation_body(project, judge, teacher), format="json")
    assert response.status_code == 400 and "never allowed" in " ".join(response.json()["teacher"]), response.content
    assert not Distillation.objects.exists()


def _drafts_reason(job_id: int) -> str:
    wait_idle(timeout=120)
    job = Distillation.objects.get(pk=job_id)
    return " ".join([job.error, *job.drafts.values_list("reason", flat=True)])


@pytest.mark.django_db(transaction=True)
def test_a_teacher_name_rebound_after_the_checks_reaches_nothing(
        attacker, no_loopback, judge_double, inprocess_executor, monkeypatch):
    user, project = attacker
    no_loopback.STUDIO_EGRESS_ALLOWED_HOSTS = [f"127.0.0.1:{judge_double.url.rsplit(':', 1)[1]}"]  # the judge only
    judge = _stored_judge(project, judge_double.api_base, name="judge")
    with CountingServer() as metadata:
        # public to the save and to the distillation's check; the metadata double from then on
        monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver(
            "teacher.rebind.test", ["8.8.8.8", "8.8.8.8", "127.0.0.1"]))
        created = api_as(user).post("/api/judge-configs/", {
            "project": project.id, "name": "teacher", "model": "openai/teacher", "api_key": "k",
            "api_base": f"http://teacher.rebind.test:{metadata.port}/v1"}, format="json")
        assert created.status_code == 201, created.content
        teacher = JudgeConfig.objects.get(pk=created.json()["id"])
        response = api_as(user).post("/api/distillations/", _distillation_body(project, judge, teacher),
                                     format="json")
        assert response.status_code == 201, response.content
        reason = _drafts_reason(response.json()["id"])
        assert metadata.requests == [] and judge_double.requests == []
    assert "loopback or private" in reason, reason


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status", [500, 200])
def test_a_teacher_whose_server_answers_with_keys_reports_a_status_and_never_the_body(
        attacker, no_loopback, judge_double, inprocess_executor, status):
    user, project = attacker
    judge = _stored_judge(project, judge_double.api_base, name="judge")
    with CountingServer(status=status) as teacher_server:  # e.g. a metadata endpoint behind an allowed address
        no_loopback.STUDIO_EGRESS_ALLOWED_HOSTS = ["127.0.0.1"]
        teacher = _stored_judge(project, f"{teacher_server.url}/v1", name="teacher")
        response = api_as(user).post("/api/distillations/", _distillation_body(project, judge, teacher),
                                     format="json")
        assert response.status_code == 201, response.content
        reason = _drafts_reason(response.json()["id"])
        assert teacher_server.requests  # it was asked, and answered with keys
    assert not any(key in reason for key in KEYS), reason
    if status == 500:
        assert "HTTP 500" in reason, reason


def test_a_judge_that_redirects_to_the_metadata_address_gets_no_request_through(attacker, settings):
    user, project = attacker
    with CountingServer() as metadata, CountingServer(status=307, body=b"") as judge_server:
        judge_server.location = f"{metadata.url}/latest/meta-data/iam/security-credentials/"
        settings.STUDIO_EGRESS_ALLOWED_HOSTS = [f"127.0.0.1:{judge_server.port}"]  # the judge's port only
        settings.STUDIO_MCP_ALLOWED_HOSTS = []
        created = api_as(user).post("/api/judge-configs/", {
            "project": project.id, "name": "j", "model": "openai/judge", "api_key": "k",
            "api_base": f"{judge_server.url}/v1"}, format="json")
        assert created.status_code == 201, created.content
        page = page_as(user).post(f"/judges/{created.json()['id']}/test/").content.decode()
        assert judge_server.requests and metadata.requests == []
    assert 'data-ok="0"' in page and "may not send requests to this address" in page
    assert not any(key in page for key in KEYS)


@pytest.mark.parametrize("model", ["openai/judge", "hosted_vllm/judge", "anthropic/claude-3-5-haiku-20241022"])
def test_dns_rebinding_between_the_calls_check_and_its_connection_is_refused_at_the_connection(no_loopback,
                                                                                                monkeypatch, model):
    """The judge's own call checks the address, then litellm's client connects: the name is rebound in between
    (public to the check, the metadata double to the connection). The pinned transport checks again, whichever
    of litellm's clients the provider uses (the OpenAI SDK's, or litellm's own HTTP handler)."""
    from judging.errors import JudgeError
    from judging.llm import call_chat

    with CountingServer() as metadata:
        monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver("judge.rebind.test",
                                                                      ["8.8.8.8", "169.254.169.254"]))
        with pytest.raises(JudgeError, match="egress policy.*never allowed"):
            asyncio.run(call_chat(model=model, messages=[{"role": "user", "content": "hi"}],
                                  params={"api_base": f"http://judge.rebind.test:{metadata.port}/v1",
                                          "api_key": "k"}, transport_retries=2, backoff_s=0.01))
        assert metadata.requests == []


def test_an_allowed_loopback_judge_still_answers_end_to_end_through_the_pinned_transport(attacker, settings):
    user, project = attacker
    with JudgeDouble(responder=JudgeDouble.score_by(lambda text: 1.0 if "4" in text else 0.0)) as double:
        settings.STUDIO_EGRESS_ALLOWED_HOSTS = [f"127.0.0.1:{double.url.rsplit(':', 1)[1]}"]
        settings.STUDIO_MCP_ALLOWED_HOSTS = []
        created = api_as(user).post("/api/judge-configs/", {
            "project": project.id, "name": "local", "model": double.model, "api_key": "k",
            "api_base": double.api_base}, format="json")
        assert created.status_code == 201, created.content
        page = page_as(user).post(f"/judges/{created.json()['id']}/test/").content.decode()
        assert 'data-ok="1"' in page, page
        assert [r.headers["host"] for r in double.requests] == [double.url.removeprefix("http://")]


def test_the_runs_mcp_connection_passes_the_egress_policy_of_its_environment(monkeypatch):
    """The engine child reads the policy the web app put in its environment; a server the policy refuses is
    never contacted, and the refusal says why."""
    import egress
    from training.environments.mcp_session import HttpServer, McpServerDidNotStart, open_session

    monkeypatch.setenv("STUDIO_EGRESS_ALLOWED_HOSTS", "")
    monkeypatch.setenv("STUDIO_MCP_ALLOWED_HOSTS", "")
    previous = egress.current_policy()
    egress.install_policy(None)  # as in the engine child: no settings, only the environment

    async def connect(url: str) -> None:
        spec = HttpServer.model_validate({"transport": "http", "url": url})
        async with open_session(spec, startup_timeout_s=5, per_call_timeout_s=5, max_result_chars=1000):
            pass

    try:
        with CountingServer() as server:
            with pytest.raises(McpServerDidNotStart, match="did not start: EgressRefused: .*loopback or private"):
                asyncio.run(connect(f"{server.url}/mcp"))
            assert server.requests == []
    finally:
        egress.install_policy(previous)


def test_the_engine_child_gets_the_deployments_policy_in_its_environment(db, settings):
    import egress
    from tests.webapp.factories import run_factory
    from webapp.execution.runner import engine_env

    settings.STUDIO_EGRESS_ALLOWED_HOSTS = ["10.0.0.0/8"]
    settings.STUDIO_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    env = engine_env(run_factory())
    policy = egress.policy_from_env(env)
    assert egress.check_url("http://10.1.2.3/v1", policy) and egress.check_url("http://127.0.0.1:9/mcp", policy)
    with pytest.raises(egress.EgressRefused):
        egress.check_url("http://192.168.1.1/v1", policy)
    settings.STUDIO_EGRESS_DENY_ALL = True
    with pytest.raises(egress.EgressRefused, match="DENY_ALL"):
        egress.check_url("https://8.8.8.8/v1", egress.policy_from_env(engine_env(run_factory())))


@pytest.mark.parametrize("variable", ["STUDIO_EGRESS_ALLOWED_HOSTS", "STUDIO_MCP_ALLOWED_HOSTS"])
def test_a_list_that_names_the_metadata_address_stops_the_app_at_start(tmp_path, variable):
    import os
    import subprocess
    import sys

    from tests.webapp.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE",
                                                              "STUDIO_MCP_ALLOWED_HOSTS")}
    env.update({"STUDIO_VAR_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "SECRET_KEY": "k" * 40,
                variable: "127.0.0.1,[::ffff:169.254.169.254]"})
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0 and f"{variable} entry '[::ffff:169.254.169.254]'" in result.stderr


@pytest.mark.parametrize("given, allowed", [
    ({}, "localhost,127.0.0.1,[::1]"),  # the laptop demo: a person's own servers on loopback
    ({"STUDIO_MCP_ALLOWED_HOSTS": "mcp.internal"}, "mcp.internal"),  # a list set: exactly what it says
    ({"STUDIO_EGRESS_ALLOWED_HOSTS": ""}, ""),
])
def test_the_embedded_default_allows_loopback_only_while_no_list_is_set(tmp_path, given, allowed):
    import os
    import subprocess
    import sys

    from tests.webapp.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "STUDIO_MCP_ALLOWED_HOSTS",
                                                              "STUDIO_EGRESS_ALLOWED_HOSTS")}
    env.update({"STUDIO_VAR_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "SECRET_KEY": "k" * 40,
                "DJANGO_SETTINGS_MODULE": "webapp.settings", **given})
    code = ("import django; django.setup(); from webapp.egress_policy import egress_entries; "
            "print(','.join(egress_entries()))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == allowed
