"""MCP server pages: add, edit, the detail page with its tools and the htmx "test connection" (queued for a
worker, polled by the page)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from webapp.forms import McpServerForm
from webapp.models import Role
from webapp.selectors import access
from webapp.selectors.mcp import mcp_server_agents, mcp_server_get, mcp_test_view, mcp_tools_rows
from webapp.services import mcp_servers as svc
from webapp.views.common import handle_form

FORM_PAGE = "webapp/form_page.html"


def _saved(request: HttpRequest, server, what: str) -> None:
    messages.success(request, what)
    if dropped := getattr(server, "headers_dropped", []):
        messages.warning(request, f"The URL now points at another origin (scheme, host or port): the stored "
                                  f"header{'s' if len(dropped) > 1 else ''} {', '.join(dropped)} "
                                  f"{'were' if len(dropped) > 1 else 'was'} removed so that it is never sent "
                                  "there. Enter them again if the new address should get them.")


@login_required
def mcp_server_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    form = McpServerForm(request.POST or None, catalogue=svc.mcp_catalogue_entries())

    def save(data):
        server = svc.mcp_server_create(user=request.user, project=project, **data)
        _saved(request, server, f"MCP server {server.name!r} added; test the connection to list its tools")
        return redirect("mcp-server-detail", server_id=server.id)

    return handle_form(request, form, save, FORM_PAGE, {"project": project, "title": "New MCP server",
                                                        "note": _NOTE})


@login_required
def mcp_server_edit(request: HttpRequest, server_id: int) -> HttpResponse:
    server = mcp_server_get(user=request.user, server_id=server_id, role=Role.EDITOR)
    catalogue = svc.mcp_catalogue_entries()
    form = (McpServerForm(request.POST, catalogue=catalogue) if request.method == "POST"
            else McpServerForm.from_server(server, catalogue=catalogue))

    def save(data):
        svc.mcp_server_update(user=request.user, server=server, **data)
        _saved(request, server, "MCP server saved; runs already launched keep the server they started with")
        return redirect("mcp-server-detail", server_id=server.id)

    stored = f" Stored headers (values hidden): {', '.join(server.header_names)}." if server.header_names else ""
    return handle_form(request, form, save, FORM_PAGE, {"project": server.project,
                                                        "title": f"MCP server {server.name}", "note": _NOTE + stored})


@login_required
@require_safe
def mcp_server_detail(request: HttpRequest, server_id: int) -> HttpResponse:
    server = mcp_server_get(user=request.user, server_id=server_id)
    role = access.project_role(user=request.user, project=server.project)
    entry = svc.mcp_catalogue_entries().get(server.catalogue_entry) if server.catalogue_entry else None
    return render(request, "webapp/mcp_server_detail.html", {
        "project": server.project, "server": server, "tools": mcp_tools_rows(tools=server.tools),
        "entry": entry, "can_test": role == Role.EDITOR, "can_edit": role == Role.EDITOR,
        "test": mcp_test_view(server=server),
    })  # can_edit also gates the Delete link: the same people may delete it


@login_required
def mcp_server_delete(request: HttpRequest, server_id: int) -> HttpResponse:
    """GET: the confirmation (what deleting changes, and the agents that stop it); POST: delete."""
    server = mcp_server_get(user=request.user, server_id=server_id, role=Role.EDITOR)
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
@require_http_methods(["GET", "HEAD", "POST"])
def mcp_server_test(request: HttpRequest, server_id: int) -> HttpResponse:
    """POST queues a test for a worker (the server never starts in the web process); GET is the page's poll:
    the result once there, else the same partial again, polling."""
    server = mcp_server_get(user=request.user, server_id=server_id, role=Role.EDITOR)
    if request.method == "POST":
        server = svc.mcp_server_test_request(user=request.user, server=server)
    test = mcp_test_view(server=server)
    return render(request, "webapp/partials/mcp_test.html", {
        "test": test, "server": server, "tools": mcp_tools_rows(tools=server.tools) if test["ok"] else []})


_NOTE = ("A stdio server is a program of this deployment's catalogue, which site administrators keep: choose one by "
         "name; no command is typed here. An HTTP server is any URL this deployment allows "
         "(STUDIO_MCP_ALLOWED_HOSTS for private addresses). Header values are "
         "stored encrypted, never shown, and never sent to another origin than the one they were given for.")
