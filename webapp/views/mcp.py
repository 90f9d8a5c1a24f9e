"""MCP server pages: add, edit, the detail page with its tools and the htmx "test connection" result."""
from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from webapp.forms import McpServerForm
from webapp.models import Role
from webapp.selectors import access
from webapp.selectors.mcp import mcp_server_agents, mcp_server_get, mcp_server_get_for_edit, mcp_tools_rows
from webapp.services import mcp_servers as svc
from webapp.views.common import handle_form

FORM_PAGE = "webapp/form_page.html"


@login_required
def mcp_server_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    form = McpServerForm(request.POST or None, allow_stdio=svc.is_project_admin(user=request.user, project=project))

    def save(data):
        server = svc.mcp_server_create(user=request.user, project=project, **data)
        messages.success(request, f"MCP server {server.name!r} added; test the connection to list its tools")
        return redirect("mcp-server-detail", server_id=server.id)

    return handle_form(request, form, save, FORM_PAGE, {"project": project, "title": "New MCP server",
                                                        "note": _NOTE})


@login_required
def mcp_server_edit(request: HttpRequest, server_id: int) -> HttpResponse:
    server = mcp_server_get_for_edit(user=request.user, server_id=server_id)
    allow_stdio = svc.is_project_admin(user=request.user, project=server.project)
    form = (McpServerForm(request.POST, allow_stdio=allow_stdio) if request.method == "POST"
            else McpServerForm.from_server(server, allow_stdio=allow_stdio))

    def save(data):
        svc.mcp_server_update(user=request.user, server=server, **data)
        messages.success(request, "MCP server saved; runs already launched keep the server they started with")
        return redirect("mcp-server-detail", server_id=server.id)

    stored = f" Stored headers (values hidden): {', '.join(server.header_names)}." if server.header_names else ""
    return handle_form(request, form, save, FORM_PAGE, {"project": server.project,
                                                        "title": f"MCP server {server.name}", "note": _NOTE + stored})


@login_required
@require_safe
def mcp_server_detail(request: HttpRequest, server_id: int) -> HttpResponse:
    server = mcp_server_get(user=request.user, server_id=server_id)
    role = access.project_role(user=request.user, project=server.project)
    return render(request, "webapp/mcp_server_detail.html", {
        "project": server.project, "server": server, "tools": mcp_tools_rows(tools=server.tools),
        "can_test": role == Role.EDITOR,
        "can_edit": role == Role.EDITOR and (server.transport == server.Transport.HTTP
                                             or svc.is_project_admin(user=request.user, project=server.project)),
    })  # can_edit also gates the Delete link: the same people may delete it


@login_required
def mcp_server_delete(request: HttpRequest, server_id: int) -> HttpResponse:
    """GET: the confirmation (what deleting changes, and the agents that stop it); POST: delete."""
    server = mcp_server_get_for_edit(user=request.user, server_id=server_id)
    errors: list[str] = []
    if request.method == "POST":
        try:
            svc.mcp_server_delete(user=request.user, server=server)
        except ValidationError as err:
            errors = [m for ms in err.message_dict.values() for m in ms]
        else:
            messages.success(request, f"MCP server {server.name!r} deleted; runs already launched keep the server "
                                      "they started with")
            return redirect("project-detail", project_id=server.project_id)
    return render(request, "webapp/mcp_server_delete.html", {
        "project": server.project, "server": server, "agents": mcp_server_agents(server=server), "errors": errors,
    }, status=400 if errors else 200)


@login_required
@require_POST
def mcp_server_test(request: HttpRequest, server_id: int) -> HttpResponse:
    """Lists the tools live with the MCP SDK, as a run's launch does; a failure is shown in people's words."""
    server = mcp_server_get(user=request.user, server_id=server_id, role=Role.EDITOR)
    result = svc.mcp_server_test(user=request.user, server=server)
    return render(request, "webapp/partials/mcp_test.html", {
        "result": result, "server": server, "tools": mcp_tools_rows(tools=result.tools)})


_NOTE = ("A stdio server is a command the workers run with their own user and network: only the project's owner "
         "(or a site administrator) may add or change one. Header values are stored encrypted and never shown.")
