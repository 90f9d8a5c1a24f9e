"""Shared by the MCP web tests: the deployment's catalogue as a site administrator sets it, and a connection test
driven as the page drives it (POST queues it, a worker runs it, the page's poll reads it)."""
from __future__ import annotations

import sys

from webapp.mcp_catalogue import CatalogueEntry, default_entries

HTMX = {"HTTP_HX_REQUEST": "true"}


def set_catalogue(settings, **entries: dict) -> None:
    """STUDIO_MCP_STDIO_SERVERS as the deployment would set it: the defaults plus `entries`
    ({name: {"command", "args", "env"}}; the command defaults to this interpreter)."""
    settings.STUDIO_MCP_STDIO_SERVERS = {**default_entries(), **{
        name: CatalogueEntry(**{"command": sys.executable, **entry}) for name, entry in entries.items()}}


def connection_test(client, server) -> str:
    """Test connection as the page does it; the queued test is run by the worker's own function here, in this
    thread, since the test's transaction is never committed for the executor's thread to see (the end-to-end
    path through the executor: tests/security/test_mcp_stdio_attacks.py)."""
    from webapp.execution.mcp_testing import mcp_server_test_execute

    queued = client.post(f"/mcp-servers/{server.pk}/test/", **HTMX).content.decode()
    assert 'data-status="queued"' in queued and "hx-get" in queued, queued
    mcp_server_test_execute(server_id=server.pk)
    return client.get(f"/mcp-servers/{server.pk}/test/", **HTMX).content.decode()
