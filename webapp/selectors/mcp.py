"""Reads of a project's MCP servers, through the reader's membership."""
from __future__ import annotations

import json
from typing import Any

from django.utils import timezone

from webapp.models import Agent, McpServer, Role
from webapp.selectors.access import in_project_get



def mcp_server_get(*, user, server_id: int, role: str = Role.VIEWER) -> McpServer:
    return in_project_get(user=user, model=McpServer, pk=server_id, role=role)


def mcp_server_agents(*, server: McpServer) -> list[Agent]:
    """The project's agents whose runs would use this server (environment `mcp` with it chosen)."""
    return list(Agent.objects.filter(project_id=server.project_id, environment_kind="mcp",
                                     environment_options__mcp_server=server.id).order_by("name"))


def mcp_test_view(*, server: McpServer) -> dict[str, Any]:
    """The last connection test as the page and the API show it: status (""/queued/running/ok/failed/stale),
    ok, error, latency_s, and whether the page should poll again."""
    Status = McpServer.TestStatus
    status, error = server.test_status, server.test_error
    waiting = status in (Status.QUEUED, Status.RUNNING)
    if waiting and server.test_requested_at and timezone.now() - server.test_requested_at > McpServer.TEST_STALE_AFTER:
        status, waiting = "stale", False
        error = ("McpServerDidNotStart: the test did not finish within 2 minutes: no worker took it (is a worker "
                 "running the `judge` queue?) or it stopped; use Test connection again")
    return {"status": status, "ok": status == Status.OK, "error": error, "latency_s": server.test_latency_s,
            "polling": waiting, "requested_at": server.test_requested_at}


def mcp_tools_rows(*, tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each tool's name, description and input schema (pretty JSON) for the tools table."""
    rows = []
    for tool in tools:
        fn = tool.get("function", {}) if isinstance(tool, dict) else {}
        rows.append({"name": str(fn.get("name", "?")), "description": str(fn.get("description") or ""),
                     "schema": json.dumps(fn.get("parameters", {}), indent=2, ensure_ascii=False)})
    return rows
