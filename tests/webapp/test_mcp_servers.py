"""MCP servers in a project: added from the browser (stdio from the deployment's catalogue only, HTTP header values
encrypted and never shown back), their tools listed by a worker against the real mailbox server over stdio and
HTTP, failures in people's words, and an agent's runs freezing the server spec with the header values kept out of
the config."""
from __future__ import annotations

import json
import sys

import pytest
from django.core.exceptions import ValidationError

from tests.training.mcp_helpers import MAILBOX, free_port, start_http_mailbox
from tests.webapp.mcp_web_helpers import connection_test, set_catalogue
from tests.webapp.factories import (
    agent_factory, mcp_server_factory, member_factory, project_factory, scenario_set_factory,
)
from webapp.execution.runner import engine_env
from webapp.models import Agent, McpServer, Role
from webapp.services import mcp_servers as svc
from webapp.services.runs import run_launch

pytestmark = pytest.mark.django_db
MAILBOX_TOOLS = ("search_inbox", "read_email", "answer")


def stdio_mailbox(project, **fields) -> McpServer:
    return svc.mcp_server_create(user=project.owner, project=project, name=fields.pop("name", "mailbox"),
                                 transport="stdio", catalogue_entry="mailbox", **fields)


def test_an_editor_adds_an_http_server_whose_header_values_are_encrypted_and_never_shown(client):
    project = project_factory()
    editor = member_factory(project=project, role=Role.EDITOR)
    client.force_login(editor)
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/", {
        "name": "search", "transport": "http", "url": "http://127.0.0.1:8765/mcp",
        "headers": "Authorization: Bearer s3cret-token\nX-Team: blue", "per_call_timeout_s": 12,
        "max_result_chars": 3000, "max_concurrent_calls": 2})
    server = McpServer.objects.get(project=project, name="search")
    assert response.status_code == 302 and response["Location"] == f"/mcp-servers/{server.pk}/"
    assert server.header_names == ["Authorization", "X-Team"] and "s3cret" not in server.headers_encrypted
    assert (server.per_call_timeout_s, server.max_result_chars, server.max_concurrent_calls) == (12, 3000, 2)
    for url in (f"/mcp-servers/{server.pk}/", f"/mcp-servers/{server.pk}/edit/", f"/projects/{project.pk}/"):
        page = client.get(url).content.decode()
        assert "s3cret" not in page and "blue" not in page
    assert "Authorization" in client.get(f"/mcp-servers/{server.pk}/").content.decode()

    # A blank header field keeps the stored values; a new value replaces that header only.
    client.post(f"/mcp-servers/{server.pk}/edit/", {
        "name": "search", "transport": "http", "url": "http://127.0.0.1:8765/mcp/v2", "headers": "X-Team: red",
        "per_call_timeout_s": 12, "max_result_chars": 3000, "max_concurrent_calls": 2})
    server.refresh_from_db()
    assert server.url == "http://127.0.0.1:8765/mcp/v2"  # another path, the same origin: the headers stay
    assert svc.mcp_server_secrets(server=server) == {"STUDIO_MCP_HEADER_0": "Bearer s3cret-token",
                                                     "STUDIO_MCP_HEADER_1": "red"}


def test_a_bad_url_or_header_line_is_refused_beside_its_field(client):
    project = project_factory()
    client.force_login(project.owner)
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/", {
        "name": "x", "transport": "http", "url": "ftp://host/mcp", "headers": "no colon here",
        "per_call_timeout_s": 30, "max_result_chars": 4000, "max_concurrent_calls": 8})
    page = response.content.decode()
    assert response.status_code == 400 and "line 1: write each header as Name: value" in page
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/", {
        "name": "x", "transport": "http", "url": "ftp://host/mcp", "per_call_timeout_s": 30,
        "max_result_chars": 4000, "max_concurrent_calls": 8})
    assert response.status_code == 400 and "give an http:// or https:// address" in response.content.decode()
    assert not McpServer.objects.exists()


def test_an_editor_chooses_a_stdio_server_from_the_catalogue_and_cannot_type_a_command(client, settings):
    set_catalogue(settings, seeded={"args": [*MAILBOX, "--seed", "2"], "description": "Another inbox"})
    project = project_factory()
    editor = member_factory(project=project, role=Role.EDITOR)
    client.force_login(editor)
    form = client.get(f"/projects/{project.pk}/mcp-servers/new/").content.decode()
    assert 'value="mailbox"' in form and "seeded: Another inbox" in form and 'name="command"' not in form
    assert sys.executable not in form  # the catalogue's commands are the deployment's: not shown
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/", {
        "name": "mail", "transport": "stdio", "catalogue_entry": "seeded", "per_call_timeout_s": 30,
        "max_result_chars": 4000, "max_concurrent_calls": 8})
    server = McpServer.objects.get(project=project, name="mail")
    assert response.status_code == 302 and server.catalogue_entry == "seeded"
    assert svc.mcp_server_spec(server=server) == {"transport": "stdio", "command": sys.executable,
                                                  "args": [*MAILBOX, "--seed", "2"], "env": {}}
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/", {
        "name": "x", "transport": "stdio", "catalogue_entry": "nope", "per_call_timeout_s": 30,
        "max_result_chars": 4000, "max_concurrent_calls": 8})
    assert response.status_code == 400 and not McpServer.objects.filter(name="x").exists()
    with pytest.raises(ValidationError, match="command cannot be set by a project member"):
        svc.mcp_server_update(user=project.owner, server=server, command="sh")
    # A server whose entry the deployment removed says so, on its page and at its agents' launch.
    set_catalogue(settings)
    settings.STUDIO_MCP_STDIO_SERVERS.pop("seeded", None)
    assert "no longer in the catalogue" in client.get(f"/mcp-servers/{server.pk}/").content.decode()
    with pytest.raises(ValidationError, match="names seeded stdio server"):
        svc.mcp_server_spec(server=server)


def test_test_connection_lists_the_mailbox_tools_over_stdio_and_keeps_them(client):
    project = project_factory()
    server = stdio_mailbox(project)
    client.force_login(project.owner)
    page = connection_test(client, server)
    assert 'data-ok="1"' in page and "3 tools listed" in page and "hx-get" not in page
    assert all(name in page for name in MAILBOX_TOOLS) and "keywords" in page  # the input schema
    server.refresh_from_db()
    assert [t["function"]["name"] for t in server.tools] == list(MAILBOX_TOOLS)
    detail = client.get(f"/mcp-servers/{server.pk}/").content.decode()
    assert "search_inbox" in detail and "No tools listed yet" not in detail


def test_test_connection_over_streamable_http_sends_the_stored_headers(client):
    project = project_factory()
    port = free_port()
    process = start_http_mailbox(port)
    try:
        server = svc.mcp_server_create(user=project.owner, project=project, name="mail", transport="http",
                                       url=f"http://127.0.0.1:{port}/mcp", headers={"X-Token": "abc"})
        client.force_login(project.owner)
        page = connection_test(client, server)
    finally:
        process.kill()
        process.wait()
    assert 'data-ok="1"' in page, page
    server.refresh_from_db()
    assert [t["function"]["name"] for t in server.tools] == list(MAILBOX_TOOLS)


def test_a_server_that_does_not_start_is_named_in_peoples_words(client, settings):
    set_catalogue(settings, gone={"command": "/nonexistent/mcp-server"})
    project = project_factory()
    missing = svc.mcp_server_create(user=project.owner, project=project, name="gone", transport="stdio",
                                    catalogue_entry="gone")
    closed = mcp_server_factory(project=project, url=f"http://127.0.0.1:{free_port()}/mcp")
    client.force_login(project.owner)
    page = connection_test(client, missing)
    assert 'data-ok="0"' in page and "exited before it answered" in page and "code 127" in page
    assert "Technical details" in page and "McpServerExited" in page and "/nonexistent/mcp-server" in page
    page = connection_test(client, closed)
    assert 'data-ok="0"' in page and "could not be reached or did not start" in page
    assert "McpServerDidNotStart" in page


def test_a_tool_description_from_the_server_is_escaped_on_the_page(client):
    project = project_factory()
    server = mcp_server_factory(project=project, tools=[{"type": "function", "function": {
        "name": "evil", "description": "<script>alert(1)</script>", "parameters": {"type": "object"}}}])
    client.force_login(project.owner)
    page = client.get(f"/mcp-servers/{server.pk}/").content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def _mcp_agent(client, project, server) -> Agent:
    client.force_login(project.owner)
    response = client.post(f"/projects/{project.pk}/agents/new/", {
        "name": "mail agent", "base_model": "tiny-2048", "environment_kind": "mcp", "mcp_server": server.pk,
        "mcp_max_turns": 4, "mcp_answer_tool": "answer", "mcp_reward": "reference", "temperature": 1.0,
        "top_p": 1.0, "max_tokens": 256})
    assert response.status_code == 302, response.content.decode()[-2000:]
    return Agent.objects.get(project=project, name="mail agent")


def test_a_run_freezes_the_server_spec_and_keeps_header_values_out_of_its_config(client):
    project = project_factory()
    server = svc.mcp_server_create(user=project.owner, project=project, name="mail", transport="http",
                                   url="http://127.0.0.1:8765/mcp", headers={"Authorization": "Bearer s3cret"},
                                   per_call_timeout_s=7)
    agent = _mcp_agent(client, project, server)
    assert agent.environment_options == {"mcp_server": server.pk, "max_turns": 4, "answer_tool": "answer",
                                         "reward": "reference"}
    run = run_launch(user=project.owner, project=project, name="r", agent=agent,
                     scenario_set=scenario_set_factory(project=project), steps=1, group_size=2, groups_per_step=1,
                     learning_rate=1e-5)
    options = run.config["environment"]["options"]
    assert run.config["environment"]["kind"] == "mcp" and options["max_turns"] == 4
    assert options["per_call_timeout_s"] == 7 and options["reward"] == "reference"
    assert options["server"] == {"transport": "http", "url": "http://127.0.0.1:8765/mcp", "headers": {},
                                 "headers_env": {"Authorization": "STUDIO_MCP_HEADER_0"}}
    assert "s3cret" not in json.dumps(run.config) and "s3cret" not in run.secrets_encrypted
    assert engine_env(run)["STUDIO_MCP_HEADER_0"] == "Bearer s3cret"  # only the engine's process gets it

    # Editing the server later changes new runs only: this run keeps what it launched with.
    svc.mcp_server_update(user=project.owner, server=server, url="http://127.0.0.1:9999/mcp",
                          headers={"Authorization": "Bearer other"})
    run.refresh_from_db()
    assert run.config["environment"]["options"]["server"]["url"] == "http://127.0.0.1:8765/mcp"
    assert engine_env(run)["STUDIO_MCP_HEADER_0"] == "Bearer s3cret"


def test_a_server_spec_cannot_reach_the_workers_except_through_a_project_server():
    project = project_factory()
    scenario_set = scenario_set_factory(project=project)
    agent = agent_factory(project=project)
    spec = {"transport": "stdio", "command": "sh", "args": ["-c", "id"]}
    with pytest.raises(ValidationError, match="environment.options.server cannot be set here"):
        run_launch(user=project.owner, project=project, name="r", agent=agent, scenario_set=scenario_set, steps=1,
                   group_size=2, groups_per_step=1, learning_rate=1e-5,
                   overrides={"environment": {"kind": "mcp", "options": {"server": spec, "reward": "reference"}}})
    from webapp.services.catalogue import agent_create, agent_update

    server = mcp_server_factory(project=project)
    with pytest.raises(ValidationError, match="a server spec cannot be written"):
        agent_create(user=project.owner, project=project, name="a", base_model="tiny-2048", environment_kind="mcp",
                     environment_options={"server": spec}, mcp_server=server)
    with pytest.raises(ValidationError, match="choose one of this project's MCP servers"):
        agent_update(user=project.owner, agent=agent, environment_kind="mcp",
                     mcp_server=mcp_server_factory(project=project_factory()))


def test_the_engine_reads_secret_headers_only_from_studio_mcp_variables(monkeypatch):
    from pydantic import ValidationError as PydanticError

    from training.environments.mcp_session import HttpServer, McpServerDidNotStart

    with pytest.raises(PydanticError):
        HttpServer(transport="http", url="http://h/mcp", headers_env={"X": "SECRET_KEY"})
    spec = HttpServer(transport="http", url="http://h/mcp", headers={"A": "1"},
                      headers_env={"Authorization": "STUDIO_MCP_HEADER_0"})
    monkeypatch.delenv("STUDIO_MCP_HEADER_0", raising=False)
    with pytest.raises(McpServerDidNotStart, match="STUDIO_MCP_HEADER_0 .* is not set"):
        spec.all_headers()
    monkeypatch.setenv("STUDIO_MCP_HEADER_0", "Bearer t")
    assert spec.all_headers() == {"A": "1", "Authorization": "Bearer t"}


def test_the_api_chooses_a_project_server_for_an_mcp_agent_by_its_id():
    from rest_framework.test import APIClient

    project = project_factory()
    server = mcp_server_factory(project=project)
    foreign = mcp_server_factory(project=project_factory())
    api = APIClient()
    api.force_authenticate(project.owner)
    body = {"project": project.pk, "name": "a", "base_model": "tiny-2048", "environment_kind": "mcp",
            "environment_options": {"mcp_server": server.pk, "reward": "reference"}}
    response = api.post("/api/agents/", body, format="json")
    assert response.status_code == 201, response.content
    assert Agent.objects.get(pk=response.json()["id"]).environment_options == {"mcp_server": server.pk,
                                                                             "reward": "reference"}
    response = api.post("/api/agents/", {**body, "name": "b", "environment_options": {"mcp_server": foreign.pk}},
                        format="json")
    assert response.status_code == 400 and "MCP servers" in response.content.decode()


def test_the_agent_form_shows_the_mcp_choices_and_a_fork_keeps_its_parents_server_and_secrets(client, tmp_path):
    from webapp.models import Checkpoint
    from webapp.services.runs import run_fork

    project = project_factory()
    server = svc.mcp_server_create(user=project.owner, project=project, name="mail", transport="http",
                                   url="http://127.0.0.1:8765/mcp", headers={"Authorization": "Bearer one"})
    agent = _mcp_agent(client, project, server)
    form = client.get(f"/agents/{agent.pk}/").content.decode()
    assert f'<option value="{server.pk}" selected>mail</option>' in form and 'name="mcp_max_turns" value="4"' in form
    run = run_launch(user=project.owner, project=project, name="r", agent=agent,
                     scenario_set=scenario_set_factory(project=project), steps=1, group_size=2, groups_per_step=1,
                     learning_rate=1e-5)
    (tmp_path / "adapter_config.json").write_text("{}")
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path=str(tmp_path), adapter_name="r@1")
    svc.mcp_server_update(user=project.owner, server=server, url="http://127.0.0.1:9999/mcp",
                          headers={"Authorization": "Bearer two"})
    fork = run_fork(user=project.owner, checkpoint=checkpoint, name="fork", rubric_version=None, judge_config=None,
                    steps=1)
    assert fork.config["environment"]["options"]["server"]["url"] == "http://127.0.0.1:8765/mcp"
    assert engine_env(fork)["STUDIO_MCP_HEADER_0"] == "Bearer one"
    with pytest.raises(ValidationError, match="environment.options.server cannot be set here"):
        run_fork(user=project.owner, checkpoint=checkpoint, name="fork2", rubric_version=None, judge_config=None,
                 steps=1, overrides={"environment": {"options": {"server": {"transport": "stdio", "command": "sh"}}}})


@pytest.mark.parametrize("mode, says", [
    ("silent", "timed out: it started or was reached, but did not list its tools in time"),
    ("bad_schema", "lists a tool a model cannot be given"),
    ("exit", "exited before it answered"),
])
def test_a_hanging_an_exiting_or_a_bad_schema_server_is_named_in_peoples_words(client, settings, mode, says):
    from tests.training.mcp_helpers import FAULT_SERVER

    set_catalogue(settings, **{mode: {"args": [FAULT_SERVER, mode]}})
    project = project_factory()
    server = svc.mcp_server_create(user=project.owner, project=project, name=mode, transport="stdio",
                                   catalogue_entry=mode, per_call_timeout_s=2 if mode == "silent" else 20)
    client.force_login(project.owner)
    page = connection_test(client, server)
    assert 'data-ok="0"' in page and says in page
    if mode == "exit":  # its exit code and last stderr line, in the details
        assert "exited with code 3" in page and "its last stderr line: fault server: refusing to start" in page
    server.refresh_from_db()
    assert server.tools == []


def test_the_api_adds_a_server_never_returns_its_header_values_and_takes_stdio_from_the_catalogue_only():
    from rest_framework.test import APIClient

    project = project_factory()
    editor = member_factory(project=project, role=Role.EDITOR)
    api = APIClient()
    api.force_authenticate(editor)
    response = api.post("/api/mcp-servers/", {"project": project.pk, "name": "search", "transport": "http",
                                              "url": "http://127.0.0.1:8765/mcp",
                                              "headers": {"Authorization": "Bearer s3cret"}}, format="json")
    assert response.status_code == 201, response.content
    body = api.get(f"/api/mcp-servers/{response.json()['id']}/").json()
    assert body["header_names"] == ["Authorization"] and "s3cret" not in json.dumps(body) and "headers" not in body
    stdio = {"project": project.pk, "name": "cmd", "transport": "stdio", "command": "python", "args": ["-V"]}
    for who in (editor, project.owner):
        api.force_authenticate(who)
        response = api.post("/api/mcp-servers/", stdio, format="json")
        assert response.status_code == 400 and "cannot be set by a project member" in response.json()["command"][0]
    response = api.post("/api/mcp-servers/", {"project": project.pk, "name": "mail", "transport": "stdio",
                                              "catalogue_entry": "mailbox"}, format="json")
    assert response.status_code == 201 and response.json()["catalogue_entry"] == "mailbox"
    assert api.get("/api/mcp-catalogue/").json()[0]["name"] == "mailbox"
    assert sys.executable not in api.get("/api/mcp-catalogue/").content.decode()
