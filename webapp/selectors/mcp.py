"""Reads of a project's MCP servers, through the reader's membership."""
from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import PermissionDenied

from webapp.models import Agent, McpServer, Role
from webapp.selectors.access import in_project_get
from webapp.services.mcp_servers import is_project_admin


def mcp_server_get(*, user, server_id: int, role: str = Role.VIEWER) -> McpServer:
    return in_project_get(user=user, model=McpServer, pk=server_id, role=role)


def mcp_server_get_for_edit(*, user, server_id: int) -> McpServer:
    """An editor's, unless it is a stdio server: that is the owner's (or a site admin's) to change."""
    server = mcp_server_get(user=user, server_id=server_id, role=Role.EDITOR)
    if server.transport == McpServer.Transport.STDIO and not is_project_admin(user=user, project=server.project):
        raise PermissionDenied("a stdio MCP server is a command the workers run: only the project's owner or a "
                               "site administrator may change it")
    return server


def mcp_server_agents(*, server: McpServer) -> list[Agent]:
    """The project's agents whose runs would use this server (environment `mcp` with it chosen)."""
    return list(Agent.objects.filter(project_id=server.project_id, environment_kind="mcp",
                                     environment_options__mcp_server=server.id).order_by("name"))


def mcp_tools_rows(*, tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each tool's name, description and input schema (pretty JSON) for the tools table."""
    rows = []
    for tool in tools:
        fn = tool.get("function", {}) if isinstance(tool, dict) else {}
        rows.append({"name": str(fn.get("name", "?")), "description": str(fn.get("description") or ""),
                     "schema": json.dumps(fn.get("parameters", {}), indent=2, ensure_ascii=False)})
    return rows
