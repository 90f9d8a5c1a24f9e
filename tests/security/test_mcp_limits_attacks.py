"""Issue 33, item 8, as an attacker's (or a broken) MCP server does it: thousands of tools, a tool of megabytes,
bytes that are not UTF-8, and a host name rebound to another address between the check and the connection. Each
is refused by name, at once, and the connection goes only to the address that was checked."""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.training.mcp_helpers import FAULT_SERVER
from tests.webapp.factories import project_factory
from tests.webapp.mcp_web_helpers import connection_test, set_catalogue
from webapp.models import McpServer
from webapp.services import mcp_servers as svc

pytestmark = pytest.mark.django_db


def _catalogue_server(settings, mode: str) -> McpServer:
    set_catalogue(settings, **{mode: {"args": [FAULT_SERVER, mode]}})
    project = project_factory()
    return svc.mcp_server_create(user=project.owner, project=project, name=mode, transport="stdio",
                                 catalogue_entry=mode, per_call_timeout_s=30)


def test_a_server_listing_3000_tools_is_refused_by_name_and_none_are_kept(client, settings):
    server = _catalogue_server(settings, "many_tools")
    client.force_login(server.project.owner)
    page = connection_test(client, server)
    assert 'data-ok="0"' in page and "more tools, or larger ones, than an agent may be given" in page
    assert "McpToolsTooLarge: the server lists 3000 tools, more than the 128" in page
    server.refresh_from_db()
    assert server.tools == [] and len(page) < 20_000  # the page names the cap; it does not carry the tools


def test_a_tool_with_a_description_of_30000_characters_is_refused_by_name(client, settings):
    server = _catalogue_server(settings, "long_description")
    client.force_login(server.project.owner)
    page = connection_test(client, server)
    assert "McpToolsTooLarge: tool &#x27;echo&#x27; has a description of 30000 characters, more than 4000" in page


def test_bytes_that_are_not_utf8_are_named_at_once_not_after_the_startup_timeout(client, settings):
    server = _catalogue_server(settings, "bad_utf8")
    client.force_login(server.project.owner)
    page = connection_test(client, server)
    assert "McpInvalidUtf8: the server wrote bytes that are not UTF-8" in page and "b&#x27;\\xff&#x27;" in page
    assert "wrote bytes that are not UTF-8 text" in page  # in people's words
    server.refresh_from_db()
    # named when the bytes came, not when the 20-s startup timeout ran out (that would be McpStartTimeout)
    assert server.test_latency_s < 20, server.test_latency_s


def test_a_name_rebound_after_the_check_still_connects_to_the_checked_address(client, settings, monkeypatch):
    """DNS rebinding: the name answers a permitted address to the check (127.0.0.1), then another (127.0.0.2,
    standing for an address the check would refuse). The connection goes to the checked address: the worker's
    child never asks DNS again (the name exists only in this fake resolver, the outside boundary here)."""
    settings.STUDIO_MCP_ALLOWED_HOSTS = ["mcp.rebind.test"]
    checked = Recorder("127.0.0.1", 0)
    rebound = Recorder("127.0.0.2", checked.port)
    real, answers = socket.getaddrinfo, iter(["127.0.0.1"] + ["127.0.0.2"] * 10)

    def rebinding(host, *args, **kwargs):
        if host == "mcp.rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), checked.port))]
        return real(host, *args, **kwargs)

    project = project_factory()
    server = McpServer.objects.create(project=project, name="rebind", transport="http",
                                      url=f"http://mcp.rebind.test:{checked.port}/mcp")
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    client.force_login(project.owner)
    with checked, rebound:
        page = connection_test(client, server)
    assert checked.hosts and not rebound.hosts, (checked.hosts, rebound.hosts)
    assert set(checked.hosts) == {f"mcp.rebind.test:{checked.port}"}  # the URL's name, sent to the checked address
    assert "McpNotMcp" in page  # the recorder answers 404


class Recorder:
    """An HTTP server on one address that records each request's Host header and answers 404."""

    def __init__(self, address: str, port: int) -> None:
        self.hosts: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                recorder.hosts.append(self.headers.get("host", ""))
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_DELETE = do_POST

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> "Recorder":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
