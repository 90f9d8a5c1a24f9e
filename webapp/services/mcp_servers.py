"""MCP servers of a project: adding and editing them, listing their tools live ("test connection"), and the
server spec an agent's runs freeze into their config (training.environments.mcp).

Who may do what (docs/mcp.md, Security): a stdio server is a program the workers run with their own user and
network, so adding one, changing one, or turning a server into one is for the project's owner or a site
administrator; editors may add and edit HTTP servers, and every member may read the tools.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError as PydanticError

from webapp.mcp_hosts import McpHostNotAllowed, check_url_allowed, parse_host_rules
from webapp.models import McpServer, Project, Role
from webapp.services.access import require_role
from webapp.services.secrets import secret_decrypt, secret_encrypt
from webapp.storable import storable

SERVER_FIELDS = ("name", "transport", "command", "args", "env", "url", "per_call_timeout_s", "max_result_chars",
                 "max_concurrent_calls")
TEST_STARTUP_TIMEOUT_S = 20.0
HEADER_ENV_PREFIX = "STUDIO_MCP_HEADER_"


def is_project_admin(*, user, project: Project) -> bool:
    """The owner of the project, or a site administrator: the people who may make workers run a command."""
    return bool(getattr(user, "is_authenticated", False)) and (
        project.owner_id == user.id or bool(getattr(user, "is_superuser", False)))


def _require_stdio_admin(user, project: Project) -> None:
    if not is_project_admin(user=user, project=project):
        raise PermissionDenied("a stdio MCP server is a command the workers run: only the project's owner or a "
                               "site administrator may add or change one")


def _decrypt(token: str, what: str) -> dict[str, str]:
    try:
        return json.loads(secret_decrypt(token=token)) if token else {}
    except ValueError:
        raise ValueError(f"{what} cannot be decrypted: SECRET_KEY or STUDIO_ENCRYPTION_KEY changed; enter the "
                         "MCP server's headers again on its page") from None


def _headers(server: McpServer) -> dict[str, str]:
    return _decrypt(server.headers_encrypted, f"the stored headers of the MCP server {server.name!r}")


def _check(server: McpServer, headers: dict[str, str]) -> None:
    """The engine's own spec models decide what a valid server is; their complaints name the field."""
    from training.environments.mcp_session import HttpServer, StdioServer

    errors: dict[str, list[str]] = {}
    if server.transport == McpServer.Transport.STDIO:
        model: Any = StdioServer
        data: dict[str, Any] = {"transport": "stdio", "command": server.command, "args": server.args,
                                "env": server.env}
    elif server.transport == McpServer.Transport.HTTP:
        model, data = HttpServer, {"transport": "http", "url": server.url, "headers": headers}
    else:
        raise ValidationError({"transport": ["choose stdio or HTTP"]})
    try:
        model.model_validate(data)
    except PydanticError as err:
        for problem in err.errors():
            key = str(problem["loc"][0]) if problem["loc"] else "transport"
            message = {"url": "give an http:// or https:// address, e.g. http://127.0.0.1:8765/mcp",
                       "command": "give the command the workers run, e.g. python"}.get(key, problem["msg"])
            errors.setdefault(key, []).append(message)
    if server.transport == McpServer.Transport.HTTP and "url" not in errors:
        try:
            mcp_url_check(url=server.url)
        except McpHostNotAllowed as err:
            errors["url"] = [str(err)]
    if not 0 < server.per_call_timeout_s <= 600:
        errors["per_call_timeout_s"] = ["the per-call timeout must be above 0 and at most 600 seconds"]
    if not 100 <= server.max_result_chars <= 200_000:
        errors["max_result_chars"] = ["the result cap must be between 100 and 200000 characters"]
    if not 1 <= server.max_concurrent_calls <= 256:
        errors["max_concurrent_calls"] = ["concurrent calls must be between 1 and 256"]
    if errors:
        raise ValidationError(errors)


def _apply(server: McpServer, fields: dict[str, Any]) -> None:
    for key in SERVER_FIELDS:
        if key in fields and fields[key] is not None:
            setattr(server, key, fields[key].strip() if isinstance(fields[key], str) else fields[key])
    headers = _headers(server)
    if fields.get("clear_headers"):
        headers = {}
    headers.update(fields.get("headers") or {})  # a blank value on the form keeps the stored one
    if server.transport == McpServer.Transport.STDIO:
        headers, server.url = {}, ""
    else:
        server.command, server.args, server.env = "", [], {}
    _check(server, headers)
    server.header_names = sorted(headers)
    server.headers_encrypted = secret_encrypt(plaintext=json.dumps(headers)) if headers else ""


def _save(server: McpServer) -> None:
    server.full_clean()
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise ValidationError({"name": ["an MCP server with this name already exists in the project"]}) from None


def mcp_url_check(*, url: str) -> None:
    """McpHostNotAllowed unless the web process may send a request to `url` (STUDIO_MCP_ALLOWED_HOSTS): checked
    when a server is saved and again before every request the web process makes to it (the name may resolve
    elsewhere by then)."""
    check_url_allowed(url, parse_host_rules(settings.STUDIO_MCP_ALLOWED_HOSTS))


def mcp_server_create(*, user, project: Project, **fields: Any) -> McpServer:
    """`headers` (HTTP): {name: value}, encrypted before it touches the database and never returned."""
    require_role(user=user, project=project, role=Role.EDITOR)
    if fields.get("transport") == McpServer.Transport.STDIO:
        _require_stdio_admin(user, project)
    server = McpServer(project=project, created_by=user if getattr(user, "is_authenticated", False) else None)
    _apply(server, fields)
    _save(server)
    return server


def mcp_server_update(*, user, server: McpServer, **fields: Any) -> McpServer:
    """A blank header value keeps the stored one; `clear_headers` removes them all. Runs already launched keep
    the spec they froze."""
    require_role(user=user, project=server.project, role=Role.EDITOR)
    if McpServer.Transport.STDIO in (server.transport, fields.get("transport")):
        _require_stdio_admin(user, server.project)
    _apply(server, fields)
    _save(server)
    return server


def mcp_server_delete(*, user, server: McpServer) -> None:
    """Deletes a server no agent uses (a stdio one: the owner's or a site admin's, as to change it). Runs already
    launched keep the spec they froze, so they show, resume and fork as before. An agent that uses the server
    refuses the deletion, naming the agents: detaching it would leave the agent unable to launch."""
    from webapp.selectors.mcp import mcp_server_agents

    require_role(user=user, project=server.project, role=Role.EDITOR)
    if server.transport == McpServer.Transport.STDIO:
        _require_stdio_admin(user, server.project)
    # An agent saved with this server between the check and the delete is not caught here: its launch then
    # says plainly that it has no MCP server of the project and to choose one (mcp_agent_environment_options).
    if agents := mcp_server_agents(server=server):
        names = ", ".join(repr(a.name) for a in agents)
        raise ValidationError({"server": [
            f"the MCP server {server.name!r} is used by agent{'s' if len(agents) > 1 else ''} {names}: "
            "choose another server (or environment) for them first, then delete it"]})
    server.delete()


def mcp_server_spec(*, server: McpServer) -> dict[str, Any]:
    """The engine's server spec as a run freezes it: header values are replaced by the names of the worker
    environment variables (mcp_server_secrets) the engine reads them from."""
    if server.transport == McpServer.Transport.STDIO:
        return {"transport": "stdio", "command": server.command, "args": list(server.args), "env": dict(server.env)}
    return {"transport": "http", "url": server.url, "headers": {},
            "headers_env": {name: f"{HEADER_ENV_PREFIX}{i}" for i, name in enumerate(sorted(server.header_names))}}


def mcp_server_secrets(*, server: McpServer) -> dict[str, str]:
    """{variable: value} for the engine's environment, matching mcp_server_spec's headers_env."""
    headers = _headers(server) if server.transport == McpServer.Transport.HTTP else {}
    return {f"{HEADER_ENV_PREFIX}{i}": headers[name] for i, name in enumerate(sorted(headers))}


def mcp_server_options(*, server: McpServer) -> dict[str, Any]:
    """The server's own options of the `mcp` environment (the agent adds max_turns, answer_tool, reward)."""
    return {"server": mcp_server_spec(server=server), "per_call_timeout_s": server.per_call_timeout_s,
            "max_result_chars": server.max_result_chars, "max_concurrent_calls": server.max_concurrent_calls}


@dataclass
class ConnectionTest:
    ok: bool
    tools: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""  # the named fault, e.g. "McpServerDidNotStart: ..."
    latency_s: float = 0.0


def mcp_server_test(*, user, server: McpServer) -> ConnectionTest:
    """Starts (stdio) or connects to (HTTP) the server with the real MCP SDK and lists its tools, as a run's
    launch does; on success the tools are kept for the detail page and the scenario generator."""
    from training.environments.mcp_session import HttpServer, McpServerError, StdioServer, open_session

    require_role(user=user, project=server.project, role=Role.EDITOR)
    if server.transport == McpServer.Transport.STDIO:
        spec: Any = StdioServer.model_validate(mcp_server_spec(server=server))
    else:
        try:
            mcp_url_check(url=server.url)
        except McpHostNotAllowed as err:  # refused before any request leaves the web process
            return ConnectionTest(ok=False, error=f"McpHostNotAllowed: {err}")
        spec = HttpServer(transport="http", url=server.url, headers=_headers(server))

    async def listed() -> list[dict[str, Any]]:
        # A server that takes longer than a tool call may take to start and list its tools hangs, for a person
        # waiting on the page (a run allows startup_timeout_s, 30 s by default).
        async with open_session(spec, startup_timeout_s=min(TEST_STARTUP_TIMEOUT_S, server.per_call_timeout_s),
                                per_call_timeout_s=server.per_call_timeout_s,
                                max_result_chars=server.max_result_chars) as session:
            return session.tools

    started = time.monotonic()
    try:
        tools = asyncio.run(listed())
    except McpServerError as err:
        return ConnectionTest(ok=False, error=f"{type(err).__name__}: {err}", latency_s=time.monotonic() - started)
    tools = storable(tools)  # the server's own text (webapp.storable)
    server.tools, server.tools_listed_at = tools, timezone.now()
    server.save(update_fields=["tools", "tools_listed_at", "updated_at"])
    return ConnectionTest(ok=True, tools=tools, latency_s=time.monotonic() - started)


def _agent_server(agent: Any) -> McpServer:
    server_id = (agent.environment_options or {}).get("mcp_server")
    server = (McpServer.objects.filter(pk=server_id, project_id=agent.project_id).first()
              if isinstance(server_id, int) else None)
    if server is None:
        raise ValidationError({"agent": [f"agent {agent.name!r} uses the mcp environment without an MCP server of "
                                         "this project: choose one on the agent's page"]})
    return server


def mcp_agent_environment_options(*, agent: Any) -> dict[str, Any]:
    """The `mcp` environment options a run of `agent` freezes: its server's spec and options, then the agent's
    own (max_turns, answer_tool, reward). A server spec written into the agent's options is refused: only a
    project's MCP server (whose stdio commands an admin added) reaches the workers."""
    options = dict(agent.environment_options or {})
    if "server" in options:
        raise ValidationError({"environment_options": ["choose the MCP server in the form; a server spec cannot be "
                                                       "written into the options"]})
    server = _agent_server(agent)
    options.pop("mcp_server")
    return {**mcp_server_options(server=server), **options}


def mcp_agent_run_secrets(*, agent: Any) -> str:
    """The encrypted {variable: value} a run of `agent` freezes beside its config ("" when none)."""
    if agent.environment_kind != "mcp":
        return ""
    secrets = mcp_server_secrets(server=_agent_server(agent))
    return secret_encrypt(plaintext=json.dumps(secrets)) if secrets else ""


def run_secrets_environment(*, secrets_encrypted: str) -> dict[str, str]:
    """What the engine's process gets in its environment for a run's frozen secrets."""
    return _decrypt(secrets_encrypted, "the MCP server headers frozen with this run")


def mcp_environment_options_clean(*, project: Project, environment_kind: str, options: dict[str, Any],
                                  mcp_server: McpServer | None, max_turns: int | None, answer_tool: str | None,
                                  reward: str | None) -> dict[str, Any]:
    """An agent's environment options as stored: for `mcp`, the chosen server's id and the agent's settings."""
    if environment_kind != "mcp":
        return options
    if mcp_server is None and isinstance(options.get("mcp_server"), int):  # the API names it in the options
        mcp_server = McpServer.objects.filter(pk=options["mcp_server"], project=project).first()
    if mcp_server is None or mcp_server.project_id != project.id:
        raise ValidationError({"mcp_server": ["choose one of this project's MCP servers"]})
    if "server" in options:
        raise ValidationError({"environment_options": ["choose the MCP server in the form; a server spec cannot be "
                                                       "written into the options"]})
    cleaned = {**options, "mcp_server": mcp_server.id}
    for key, value in (("max_turns", max_turns), ("answer_tool", answer_tool), ("reward", reward)):
        if value not in (None, ""):
            cleaned[key] = value
    return cleaned
