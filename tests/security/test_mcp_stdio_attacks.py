"""Issue 33, item 1, as the attacker does it: an ordinary account signs up, creates its own project (which makes
it the owner) and adds a stdio MCP server that runs `sh -c 'id; cat /proc/$PPID/environ'`, through the form and
through the API, then tries to smuggle a command into a catalogue server (args, env, cwd) or to turn an HTTP
server into one. Every attempt is refused naming the field, stores nothing and runs nothing. And what a stdio
server of the deployment's catalogue can see when a worker starts it: no secret of the web app, the worker or
the engine, in its own environment or any process above it."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tests.security.overrides_helpers import api_as, attacker_signs_up, page_as
from tests.training.mcp_helpers import FAULT_SERVER
from tests.webapp.conftest import inprocess_executor  # noqa: F401  (fixture)
from tests.webapp.factories import mcp_server_factory
from tests.webapp.mcp_web_helpers import HTMX, set_catalogue
from webapp.models import McpServer

ID_AND_ENVIRON = ["-c", "id > {marker}; cat /proc/$PPID/environ >> {marker}"]
FORM = {"per_call_timeout_s": 30, "max_result_chars": 4000, "max_concurrent_calls": 8}


def _attack(tmp_path: Path) -> tuple[Path, list[str]]:
    marker = tmp_path / "ran"
    return marker, [arg.format(marker=marker) for arg in ID_AND_ENVIRON]


@pytest.mark.django_db
def test_an_ordinary_account_cannot_add_a_stdio_server_that_runs_its_command_through_the_api(tmp_path):
    attacker = attacker_signs_up()
    marker, args = _attack(tmp_path)
    api = api_as(attacker.user)
    response = api.post("/api/mcp-servers/", {"project": attacker.project.id, "name": "mine", "transport": "stdio",
                                              "command": "sh", "args": args}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert {"command", "args"} <= set(body) and "cannot be set by a project member" in body["command"][0]
    # A catalogue server with the attacker's arguments, environment or working directory: refused the same way.
    for smuggled in ({"args": args}, {"env": {"PYTHONSTARTUP": str(marker)}}, {"cwd": "/tmp"}):
        response = api.post("/api/mcp-servers/", {"project": attacker.project.id, "name": "mail", "transport": "stdio",
                                                  "catalogue_entry": "mailbox", **smuggled}, format="json")
        assert response.status_code == 400 and list(smuggled)[0] in response.json(), response.content
    # Nor turn an HTTP server of the project into one, then test it.
    http = mcp_server_factory(project=attacker.project)
    response = api.patch(f"/api/mcp-servers/{http.id}/", {"transport": "stdio", "command": "sh", "args": args},
                         format="json")
    assert response.status_code == 400 and "command" in response.json()
    assert api.post(f"/api/mcp-servers/{http.id}/test/").status_code == 202  # an HTTP server, tested as before
    assert McpServer.objects.get(pk=http.id).transport == "http"
    assert list(McpServer.objects.filter(project=attacker.project).values_list("name", flat=True)) == [http.name]
    assert not marker.exists()


@pytest.mark.django_db
def test_an_ordinary_account_cannot_add_a_stdio_server_that_runs_its_command_through_the_form(tmp_path):
    attacker = attacker_signs_up()
    marker, args = _attack(tmp_path)
    page = page_as(attacker.user)
    response = page.post(f"/projects/{attacker.project.id}/mcp-servers/new/", {
        "name": "mine", "transport": "stdio", "command": "sh", "args": "\n".join(args), **FORM})
    assert response.status_code == 400
    text = response.content.decode()
    assert "command, args cannot be set by a project member" in text and "catalogue" in text
    response = page.post(f"/projects/{attacker.project.id}/mcp-servers/new/", {
        "name": "mine", "transport": "stdio", "catalogue_entry": "mailbox", "env": '{"LD_PRELOAD": "/tmp/x.so"}',
        **FORM})
    assert response.status_code == 400 and "env cannot be set by a project member" in response.content.decode()
    assert not McpServer.objects.filter(project=attacker.project).exists() and not marker.exists()


@pytest.fixture
def secrets_in_this_process(monkeypatch):
    """What a deployment's web process and workers hold: the database URL, the keys, a provider's API key."""
    canaries = {"OPENAI_API_KEY": "sk-canary-openai-0001", "STUDIO_ENCRYPTION_KEY": "canary-encryption-key-0002",
                "JUDGE_API_KEY": "canary-judge-key-0003"}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    found = {"DATABASE_URL": os.environ.get("DATABASE_URL", ""), "SECRET_KEY": django_settings.SECRET_KEY,
             **canaries}
    return {name: value for name, value in found.items() if value}


@pytest.mark.django_db(transaction=True)
def test_a_stdio_server_reading_its_own_and_its_parents_environment_finds_no_secret(
        client, settings, inprocess_executor, secrets_in_this_process, monkeypatch):
    from webapp.execution.executors import wait_idle

    python = sys.executable
    if os.geteuid() == 0:  # as the images do it: the server runs as another, unprivileged user (root reads all)
        monkeypatch.setenv("STUDIO_MCP_RUN_AS", "nobody")
        python = "/usr/bin/python3"  # one that user may run (this one may live in root's home)
    shared = Path(tempfile.mkdtemp(prefix="mcp-dump-"))  # pytest's tmp_path is its user's alone
    shared.chmod(0o777)
    dump = shared / "environ"
    set_catalogue(settings, nosy={"command": python, "args": [FAULT_SERVER, "environ"],
                                  "env": {"FAULT_SERVER_DUMP": str(dump)}})
    attacker = attacker_signs_up()
    server = McpServer.objects.create(project=attacker.project, name="nosy", transport="stdio",
                                      catalogue_entry="nosy", per_call_timeout_s=20)
    client.force_login(attacker.user)
    # Test connection, as the page does it: queued for a worker (here the embedded executor's thread, which
    # starts the server in a child process), answered through the page's polling.
    queued = client.post(f"/mcp-servers/{server.id}/test/", **HTMX).content.decode()
    assert 'data-status="queued"' in queued and "hx-get" in queued
    wait_idle(timeout=120)
    page = client.get(f"/mcp-servers/{server.id}/test/", **HTMX).content.decode()
    assert 'data-ok="1"' in page, page
    seen = dump.read_bytes()
    shutil.rmtree(shared)
    entries = seen.split(b"\n")
    assert b"FAULT_SERVER_DUMP=" in entries[0]  # its own environment, read
    for name, value in secrets_in_this_process.items():
        assert value.encode() not in seen, f"the server read {name}"
    # Every process above it that holds this process's environment refuses: this one is the web app's.
    assert f"pid {os.getpid()}: [Errno 13] Permission denied".encode() in seen


@pytest.mark.django_db
def test_mcp_roles_who_may_choose_a_catalogue_server_and_that_no_role_may_give_one_a_command():
    """The authorisation matrix's complement for stdio servers: by role, through the API, choosing the catalogue's
    mailbox, then the same body with a command."""
    from rest_framework.test import APIClient

    from tests.webapp.factories import member_factory, project_factory
    from webapp.models import Role

    project = project_factory()
    people = {"owner": project.owner, "editor": member_factory(project=project, role=Role.EDITOR),
              "reviewer": member_factory(project=project, role=Role.REVIEWER),
              "viewer": member_factory(project=project, role=Role.VIEWER), "outsider": project_factory().owner,
              "token of the project": None, "anonymous": None}
    expected = {"owner": 201, "editor": 201, "reviewer": 403, "viewer": 403, "outsider": 404,
                "token of the project": 401, "anonymous": 401}
    from webapp.services.project_tokens import project_token_create

    _, key = project_token_create(user=project.owner, project=project, name="ci")
    for who, user in people.items():
        client = api_as(user) if user is not None else APIClient()
        if who == "token of the project":
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        body = {"project": project.id, "name": f"mail {who}", "transport": "stdio", "catalogue_entry": "mailbox"}
        assert client.post("/api/mcp-servers/", body, format="json").status_code == expected[who], who
        with_command = client.post("/api/mcp-servers/", {**body, "name": f"cmd {who}", "command": "sh"},
                                   format="json")
        # refused for what it is, before the role is looked at (nothing about the project is learned from it)
        assert with_command.status_code == (401 if expected[who] == 401 else 400), who
        if expected[who] == 401:
            assert client.get("/api/mcp-catalogue/").status_code == 401
        else:
            assert [e["name"] for e in client.get("/api/mcp-catalogue/").json()] == ["mailbox"], who
    assert sorted(McpServer.objects.filter(project=project).values_list("name", flat=True)) == [
        "mail editor", "mail owner"]
