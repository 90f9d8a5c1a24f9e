"""The MCP server addresses the web process may reach (STUDIO_MCP_ALLOWED_HOSTS): public hosts always, loopback and
private ones only when listed, link-local (cloud metadata) never. Checked when a server is saved (form and API,
nothing stored) and before "Test connection" sends anything; a bad value stops the app at start."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.conftest import ROOT
from tests.webapp.factories import mcp_server_factory, project_factory
from tests.webapp.mcp_web_helpers import connection_test
from webapp.mcp_hosts import McpHostNotAllowed, check_url_allowed, parse_host_rules
from webapp.models import McpServer
from webapp.services import mcp_servers as svc

pytestmark = pytest.mark.django_db
FORM = {"transport": "http", "per_call_timeout_s": 5, "max_result_chars": 4000, "max_concurrent_calls": 2}


class _Listener:
    """A TCP socket on loopback that counts the connections it gets: proof that a refusal sent nothing."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener():
    server = _Listener()
    yield server
    server.close()


@pytest.mark.parametrize("url, allowed", [
    ("http://8.8.8.8/mcp", True),  # a public address: no entry needed
    ("http://127.0.0.1:8765/mcp", False),
    ("http://10.1.2.3/mcp", False),
    ("http://192.168.0.9:80/mcp", False),
    ("http://[::1]:8765/mcp", False),
    ("http://169.254.169.254/latest/meta-data/", False),
    ("http://[::ffff:169.254.169.254]/", False),
    ("http://0.0.0.0:8765/mcp", False),
])
def test_with_no_entries_only_public_addresses_are_reachable(url, allowed):
    if allowed:
        check_url_allowed(url, [])
    else:
        with pytest.raises(McpHostNotAllowed):
            check_url_allowed(url, [])


def test_entries_open_loopback_and_private_hosts_by_address_network_name_and_port():
    rules = parse_host_rules(["127.0.0.1:8765", "10.0.0.0/8", "localhost", "[::1]"])
    check_url_allowed("http://127.0.0.1:8765/mcp", rules)
    check_url_allowed("http://10.200.0.1:9000/mcp", rules)
    check_url_allowed("http://localhost:1234/mcp", rules)
    check_url_allowed("http://[::1]:9/mcp", rules)
    with pytest.raises(McpHostNotAllowed, match="STUDIO_MCP_ALLOWED_HOSTS lists it"):
        check_url_allowed("http://127.0.0.1:8766/mcp", rules)  # another port
    with pytest.raises(McpHostNotAllowed):
        check_url_allowed("http://192.168.1.1/mcp", rules)
    # `*` opens private hosts, never the link-local metadata endpoint
    check_url_allowed("http://192.168.1.1/mcp", parse_host_rules(["*"]))
    with pytest.raises(McpHostNotAllowed, match="never allowed"):
        check_url_allowed("http://169.254.169.254/", parse_host_rules(["*"]))


@pytest.mark.parametrize("entry, says", [
    ("169.254.169.254", "never allowed"),
    ("169.254.0.0/16", "never allowed"),
    ("0.0.0.0/0", "never allowed"),
    ("host:port", "expected a host name"),
    ("10.0.0.1:70000", "port is a number"),
    ("bad host!", "expected a host name"),
])
def test_a_bad_entry_is_refused_with_its_text(entry, says):
    with pytest.raises(ValueError, match=f"STUDIO_MCP_ALLOWED_HOSTS entry .*{says}"):
        parse_host_rules([entry])


def test_a_bad_value_stops_the_app_at_start_with_its_name(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update({"STUDIO_VAR_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "SECRET_KEY": "k" * 40,
                "STUDIO_MCP_ALLOWED_HOSTS": "127.0.0.1,169.254.169.254"})
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    assert "STUDIO_MCP_ALLOWED_HOSTS entry '169.254.169.254'" in result.stderr


def test_saving_a_server_at_an_address_not_allowed_is_refused_beside_the_url_and_stores_nothing(client, settings):
    settings.STUDIO_MCP_ALLOWED_HOSTS = []
    project = project_factory()
    client.force_login(project.owner)
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/",
                           {**FORM, "name": "local", "url": "http://127.0.0.1:8765/mcp"})
    assert response.status_code == 400 and "STUDIO_MCP_ALLOWED_HOSTS" in response.content.decode()
    response = client.post(f"/projects/{project.pk}/mcp-servers/new/",
                           {**FORM, "name": "meta", "url": "http://169.254.169.254/latest/"})
    assert response.status_code == 400 and "never allowed" in response.content.decode()
    assert not McpServer.objects.exists()

    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(project.owner)
    response = api.post("/api/mcp-servers/", {"project": project.pk, "name": "api", "transport": "http",
                                              "url": "http://10.0.0.7/mcp"}, format="json")
    assert response.status_code == 400 and "url" in response.json(), response.content
    assert not McpServer.objects.exists()

    settings.STUDIO_MCP_ALLOWED_HOSTS = ["127.0.0.1:8765"]
    server = svc.mcp_server_create(user=project.owner, project=project, name="listed",
                                   transport="http", url="http://127.0.0.1:8765/mcp")
    with pytest.raises(ValidationError, match="STUDIO_MCP_ALLOWED_HOSTS"):  # nor moved elsewhere by an edit
        svc.mcp_server_update(user=project.owner, server=server, url="http://127.0.0.1:8766/mcp")
    assert McpServer.objects.get(pk=server.pk).url == "http://127.0.0.1:8765/mcp"


def test_test_connection_to_an_address_no_longer_allowed_is_refused_by_name_and_sends_nothing(
        client, settings, listener):
    project = project_factory()
    server = mcp_server_factory(project=project, url=f"http://127.0.0.1:{listener.port}/mcp",
                                per_call_timeout_s=3)
    settings.STUDIO_MCP_ALLOWED_HOSTS = []  # e.g. the administrator narrowed the list after it was saved
    client.force_login(project.owner)
    page = connection_test(client, server)
    assert 'data-ok="0"' in page and "may not connect to this MCP server" in page and "McpHostNotAllowed: " in page
    assert listener.connections == 0

    settings.STUDIO_MCP_ALLOWED_HOSTS = ["127.0.0.1"]  # the control: allowed, the same test does connect
    page = connection_test(client, server)
    assert 'data-ok="0"' in page and "McpHostNotAllowed" not in page  # reached: not an MCP server
    assert listener.connections >= 1
