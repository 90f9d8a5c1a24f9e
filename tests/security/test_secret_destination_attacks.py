"""Issue 33, item 2, as the attacker does it: an editor of someone's project changes only where a stored secret
goes (an MCP server's URL, a judge's API base or model provider) to a listener of theirs, then asks the app to
call it (Test connection, Test judge). The stored header or key is dropped by the change unless the same request
gives one again, the page and the API say so, and the listener receives no stored secret."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.security.overrides_helpers import api_as, page_as
from tests.webapp.factories import judge_factory, member_factory, project_factory
from webapp.execution.mcp_testing import mcp_server_test_execute
from webapp.models import JudgeConfig, McpServer, Role
from webapp.services import mcp_servers as mcp_svc
from webapp.services.catalogue import judge_config_update
from webapp.services.secrets import secret_encrypt

pytestmark = pytest.mark.django_db
SECRET = "Bearer TOP-SECRET-123"
JUDGE_KEY = "sk-judge-TOP-SECRET-456"


class Listener:
    """The attacker's HTTP server: records every request's headers, answers 404."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                listener.seen.append(dict(self.headers.items()))
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Listener":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self, text: str) -> bool:
        return any(text in value for headers in self.seen for value in headers.values())


def _victims_server():
    project = project_factory()
    server = mcp_svc.mcp_server_create(user=project.owner, project=project, name="search", transport="http",
                                       url="http://127.0.0.1:8765/mcp", headers={"Authorization": SECRET})
    return project, server, member_factory(project=project, role=Role.EDITOR)


def test_an_editor_who_changes_only_the_mcp_url_through_the_api_sends_the_listener_no_stored_header():
    project, server, editor = _victims_server()
    with Listener() as listener:
        response = api_as(editor).patch(f"/api/mcp-servers/{server.id}/", {"url": f"{listener.url}/mcp"},
                                        format="json")
        assert response.status_code == 200, response.content
        assert response.json()["headers_dropped"] == ["Authorization"] and response.json()["header_names"] == []
        assert api_as(editor).post(f"/api/mcp-servers/{server.id}/test/").status_code == 202
        mcp_server_test_execute(server_id=server.id)  # what the worker runs for the queued test
        assert listener.seen, "the test never reached the listener"
        assert not listener.received("TOP-SECRET-123")
    assert "McpNotMcp" in McpServer.objects.get(pk=server.id).test_error  # a 404: named as not MCP


def test_an_editor_who_changes_only_the_mcp_url_through_the_form_is_told_the_headers_were_removed():
    project, server, editor = _victims_server()
    with Listener() as listener:
        response = page_as(editor).post(f"/mcp-servers/{server.id}/edit/", {
            "name": "search", "transport": "http", "url": f"{listener.url}/mcp", "per_call_timeout_s": 30,
            "max_result_chars": 4000, "max_concurrent_calls": 8}, follow=True)
        page = response.content.decode()
        assert "the stored header Authorization was removed" in page
        mcp_svc.mcp_server_test_request(user=editor, server=server)
        mcp_server_test_execute(server_id=server.id)
        assert listener.seen and not listener.received("TOP-SECRET-123")
    # The same origin keeps them; a new origin with the header given again in the same request keeps that one.
    mcp_svc.mcp_server_update(user=editor, server=server, url="http://127.0.0.1:8765/other",
                              headers={"Authorization": "Bearer new"})
    server = McpServer.objects.get(pk=server.id)
    mcp_svc.mcp_server_update(user=editor, server=server, url="http://127.0.0.1:8765/mcp")
    assert mcp_svc.mcp_server_secrets(server=McpServer.objects.get(pk=server.id)) == {
        "STUDIO_MCP_HEADER_0": "Bearer new"}


def _victims_judge():
    project = project_factory()
    judge = judge_factory(project=project, model="openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1",
                          api_key_env="", api_key_encrypted=secret_encrypt(plaintext=JUDGE_KEY))
    return project, judge, member_factory(project=project, role=Role.EDITOR)


def test_an_editor_who_points_a_judge_at_a_listener_drops_its_stored_key_and_the_listener_gets_none():
    project, judge, editor = _victims_judge()
    with Listener() as listener:
        response = api_as(editor).patch(f"/api/judge-configs/{judge.id}/", {"api_base": f"{listener.url}/v1"},
                                        format="json")
        assert response.status_code == 200, response.content
        assert response.json()["key_dropped"] is True and response.json()["has_stored_key"] is False
        page_as(editor).post(f"/judges/{judge.id}/test/")  # Test judge: one real request to its API base
        assert listener.seen, "Test judge never reached the listener"
        assert not listener.received("TOP-SECRET-456")
    assert JudgeConfig.objects.get(pk=judge.id).api_key_encrypted == ""


def test_a_judge_whose_model_provider_changes_drops_its_key_in_the_form_too_unless_one_is_given():
    project, judge, editor = _victims_judge()
    form = {"name": judge.name, "model": "anthropic/claude-x", "api_base": judge.api_base, "api_key_env": "",
            "temperature": 0.0, "passes": 1, "concurrency": 4}
    page = page_as(editor).post(f"/judges/{judge.id}/", form, follow=True).content.decode()
    assert "the stored API key was removed" in page
    assert not JudgeConfig.objects.get(pk=judge.id).has_stored_key
    # The same destination keeps the key; a new one with a key in the same request stores that key.
    judge = JudgeConfig.objects.get(pk=judge.id)
    judge_config_update(user=editor, judge=judge, api_key="sk-new")
    judge_config_update(user=editor, judge=judge, temperature=0.5)
    assert judge.has_stored_key and not judge.key_dropped
    judge_config_update(user=editor, judge=judge, api_base="http://127.0.0.1:10/v1", api_key="sk-other")
    assert judge.has_stored_key and not judge.key_dropped
