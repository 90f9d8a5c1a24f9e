"""Deleting an MCP server: by the people who may change it (editors; a stdio server is a reference to the
deployment's catalogue, so the same people), after a confirmation page, from the page or the API; refused, naming them, while agents use it; runs already launched
keep the spec they froze and still show."""
from __future__ import annotations

import sys

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from rest_framework.test import APIClient

from tests.training.mcp_helpers import MAILBOX
from tests.webapp.factories import mcp_server_factory, member_factory, project_factory, scenario_set_factory
from webapp.models import McpServer, Role
from webapp.services import mcp_servers as svc
from webapp.services.catalogue import agent_create, agent_update
from webapp.services.runs import run_launch

pytestmark = pytest.mark.django_db


def _stdio(project) -> McpServer:
    return svc.mcp_server_create(user=project.owner, project=project, name="mailbox", transport="stdio",
                                 catalogue_entry="mailbox")


def _agent(project, server, name="mail agent"):
    return agent_create(user=project.owner, project=project, name=name, base_model="tiny-2048",
                        environment_kind="mcp", environment_options={}, mcp_server=server, mcp_reward="reference")


def test_the_owner_deletes_a_stdio_server_after_a_confirmation_page(client):
    project = project_factory()
    server = _stdio(project)
    client.force_login(project.owner)
    detail = client.get(f"/mcp-servers/{server.pk}/").content.decode()
    assert f'href="/mcp-servers/{server.pk}/delete/"' in detail
    confirm = client.get(f"/mcp-servers/{server.pk}/delete/")
    page = confirm.content.decode()
    assert confirm.status_code == 200 and "Delete MCP server mailbox?" in page and 'id="mcp-delete-confirm"' in page
    assert McpServer.objects.filter(pk=server.pk).exists()  # the GET deleted nothing
    response = client.post(f"/mcp-servers/{server.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == f"/projects/{project.pk}/"
    assert not McpServer.objects.filter(pk=server.pk).exists()
    assert "deleted" in client.get(f"/projects/{project.pk}/").content.decode()
    assert client.get(f"/mcp-servers/{server.pk}/").status_code == 404


def test_an_editor_deletes_a_server_and_a_viewer_or_outsider_deletes_nothing(client):
    project = project_factory()
    stdio = _stdio(project)
    http = mcp_server_factory(project=project)
    editor = member_factory(project=project, role=Role.EDITOR)
    viewer = member_factory(project=project, role=Role.VIEWER)
    outsider = project_factory().owner
    with pytest.raises(PermissionDenied):
        svc.mcp_server_delete(user=viewer, server=http)
    client.force_login(viewer)
    assert client.get(f"/mcp-servers/{http.pk}/delete/").status_code == 403
    assert client.post(f"/mcp-servers/{http.pk}/delete/").status_code == 403
    assert 'id="mcp-delete"' not in client.get(f"/mcp-servers/{http.pk}/").content.decode()
    client.force_login(outsider)
    assert client.post(f"/mcp-servers/{http.pk}/delete/").status_code == 404
    assert client.post(f"/mcp-servers/{stdio.pk}/delete/").status_code == 404
    assert McpServer.objects.filter(pk__in=[stdio.pk, http.pk]).count() == 2

    client.force_login(editor)
    assert 'id="mcp-delete"' in client.get(f"/mcp-servers/{stdio.pk}/").content.decode()
    assert client.post(f"/mcp-servers/{http.pk}/delete/").status_code == 302
    assert client.post(f"/mcp-servers/{stdio.pk}/delete/").status_code == 302
    assert not McpServer.objects.filter(project=project).exists()


def test_a_server_an_agent_uses_is_not_deleted_and_the_agents_are_named(client):
    project = project_factory()
    server = _stdio(project)
    _agent(project, server, "alpha")
    beta = _agent(project, server, "beta")
    other = _agent(project, _stdio_other(project), "gamma")  # another server's agent is not named
    with pytest.raises(ValidationError, match="used by agents 'alpha', 'beta': choose another server"):
        svc.mcp_server_delete(user=project.owner, server=server)
    client.force_login(project.owner)
    confirm = client.get(f"/mcp-servers/{server.pk}/delete/").content.decode()
    assert "These agents use it" in confirm and "alpha" in confirm and "beta" in confirm and "gamma" not in confirm
    assert 'id="mcp-delete-confirm"' not in confirm
    response = client.post(f"/mcp-servers/{server.pk}/delete/")
    assert response.status_code == 400 and "used by agents" in response.content.decode()
    assert McpServer.objects.filter(pk=server.pk).exists()

    # once no agent uses it (another environment for one, another server for the other), it goes
    agent_update(user=project.owner, agent=beta, environment_kind="chat", environment_options={})
    alpha = project.agents.get(name="alpha")
    agent_update(user=project.owner, agent=alpha, environment_kind="mcp", mcp_server=other_server(other))
    svc.mcp_server_delete(user=project.owner, server=server)
    assert not McpServer.objects.filter(pk=server.pk).exists()


def _stdio_other(project) -> McpServer:
    return svc.mcp_server_create(user=project.owner, project=project, name="other", transport="stdio",
                                 catalogue_entry="mailbox")


def other_server(agent) -> McpServer:
    return McpServer.objects.get(pk=agent.environment_options["mcp_server"])


def test_a_run_launched_on_a_deleted_server_keeps_its_frozen_spec_and_its_pages_still_show(client):
    project = project_factory()
    server = _stdio(project)
    agent = _agent(project, server)
    run = run_launch(user=project.owner, project=project, name="before", agent=agent,
                     scenario_set=scenario_set_factory(project=project), steps=1, group_size=2, groups_per_step=1,
                     learning_rate=1e-5)
    spec = run.config["environment"]["options"]["server"]
    agent_update(user=project.owner, agent=agent, environment_kind="chat", environment_options={})
    svc.mcp_server_delete(user=project.owner, server=server)
    run.refresh_from_db()
    assert run.config["environment"]["options"]["server"] == spec == {
        "transport": "stdio", "command": sys.executable, "args": [*MAILBOX, "--transport", "stdio"], "env": {}}
    client.force_login(project.owner)
    for url in (f"/runs/{run.pk}/", f"/projects/{project.pk}/", f"/agents/{agent.pk}/"):
        assert client.get(url).status_code == 200, url
    api = APIClient()
    api.force_authenticate(project.owner)
    # people see that it is a stdio server, not the deployment's program, arguments or environment
    assert api.get(f"/api/runs/{run.pk}/").json()["config"]["environment"]["options"]["server"] == {
        "transport": "stdio"}


def test_the_api_deletes_a_server_with_the_same_rules():
    project = project_factory()
    stdio = _stdio(project)
    http = mcp_server_factory(project=project)
    used = mcp_server_factory(project=project)
    _agent(project, used)
    editor = member_factory(project=project, role=Role.EDITOR)
    viewer = member_factory(project=project, role=Role.VIEWER)
    api = APIClient()
    api.force_authenticate(project_factory().owner)
    assert api.delete(f"/api/mcp-servers/{http.pk}/").status_code == 404
    api.force_authenticate(viewer)
    assert api.delete(f"/api/mcp-servers/{http.pk}/").status_code == 403
    api.force_authenticate(editor)
    response = api.delete(f"/api/mcp-servers/{used.pk}/")
    assert response.status_code == 400 and "used by agent 'mail agent'" in response.content.decode()
    assert McpServer.objects.filter(project=project).count() == 3
    assert api.delete(f"/api/mcp-servers/{http.pk}/").status_code == 204
    assert api.delete(f"/api/mcp-servers/{stdio.pk}/").status_code == 204
    assert list(McpServer.objects.filter(project=project)) == [used]
