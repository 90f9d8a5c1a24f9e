"""MCP servers of a project: adding and editing them, listing their tools ("test connection", run by a worker)
and the server spec an agent's runs freeze into their config (training.environments.mcp).

Who may do what (docs/security.md, Roles): editors add, edit and delete a project's servers and test them; every
member reads the tools. A stdio server is a program the workers run, so no member writes one: it names an entry
of the deployment's catalogue (STUDIO_MCP_STDIO_SERVERS, webapp/mcp_catalogue.py), which only site administrators
edit; a request that carries a command, arguments, environment or working directory is refused, naming them.
Secrets follow their destination: an HTTP server whose URL moves to another origin loses its stored headers
unless the same request gives them again.
"""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError as PydanticError

from webapp.execution.dispatch import MCP_TEST, work_enqueue
from webapp.egress_policy import egress_policy
from webapp.mcp_hosts import McpHostNotAllowed, check_url_allowed
from webapp.models import McpServer, Project, Role
from webapp.services.access import require_role
from webapp.services.secrets import secret_decrypt, secret_encrypt

SERVER_FIELDS = ("name", "transport", "catalogue_entry", "url", "per_call_timeout_s", "max_result_chars",
                 "max_concurrent_calls")
# What a person may never send for a server: the catalogue names the program and how it runs.
COMMAND_FIELDS = ("command", "args", "env", "cwd")
HEADER_ENV_PREFIX = "STUDIO_MCP_HEADER_"
COMMAND_REFUSED = ("a stdio MCP server runs a program of this deployment's catalogue: {fields} cannot be set by "
                   "a project member; choose a catalogue entry ({entries}), or ask a site administrator to add "
                   "the server to STUDIO_MCP_STDIO_SERVERS")


def mcp_catalogue_entries() -> dict[str, Any]:
    """The deployment's stdio servers, {name: CatalogueEntry}."""
    return dict(settings.STUDIO_MCP_STDIO_SERVERS)


def mcp_command_fields_refuse(*, sent: Any) -> None:
    """ValidationError naming each command field in `sent` (a form's or a request's data): refused whatever
    the value, before anything is stored."""
    named = [key for key in COMMAND_FIELDS if key in sent]
    if named:
        message = COMMAND_REFUSED.format(fields=", ".join(named), entries=", ".join(sorted(mcp_catalogue_entries())))
        raise ValidationError({key: [message] for key in named})


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
    from training.environments.mcp_session import HttpServer

    errors: dict[str, list[str]] = {}
    if server.transport == McpServer.Transport.STDIO:
        entries = mcp_catalogue_entries()
        if server.catalogue_entry not in entries:
            errors["catalogue_entry"] = [f"choose one of this deployment's stdio servers: {', '.join(sorted(entries))}"]
    elif server.transport == McpServer.Transport.HTTP:
        try:
            HttpServer.model_validate({"transport": "http", "url": server.url, "headers": headers})
        except PydanticError as err:
            for problem in err.errors():
                key = str(problem["loc"][0]) if problem["loc"] else "transport"
                message = {"url": "give an http:// or https:// address, e.g. http://127.0.0.1:8765/mcp"}.get(
                    key, problem["msg"])
                errors.setdefault(key, []).append(message)
        if "url" not in errors:
            try:
                mcp_url_check(url=server.url)
            except McpHostNotAllowed as err:
                errors["url"] = [str(err)]
    else:
        raise ValidationError({"transport": ["choose stdio or HTTP"]})
    if not 0 < server.per_call_timeout_s <= 600:
        errors["per_call_timeout_s"] = ["the per-call timeout must be above 0 and at most 600 seconds"]
    if not 100 <= server.max_result_chars <= 200_000:
        errors["max_result_chars"] = ["the result cap must be between 100 and 200000 characters"]
    if not 1 <= server.max_concurrent_calls <= 256:
        errors["max_concurrent_calls"] = ["concurrent calls must be between 1 and 256"]
    if errors:
        raise ValidationError(errors)


def url_origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the default port filled in: where a request and its headers go."""
    parts = urlsplit(url or "")
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").rstrip(".").lower(), port or {"http": 80, "https": 443}.get(scheme)


def _apply(server: McpServer, fields: dict[str, Any]) -> list[str]:
    """Sets the fields; returns the names of stored headers dropped because the URL moved to another origin."""
    mcp_command_fields_refuse(sent=fields)
    stored_origin = url_origin(server.url) if server.pk and server.url else None
    for key in SERVER_FIELDS:
        if key in fields and fields[key] is not None:
            setattr(server, key, fields[key].strip() if isinstance(fields[key], str) else fields[key])
    headers = _headers(server)
    dropped: list[str] = []
    given = fields.get("headers") or {}
    if stored_origin is not None and url_origin(server.url) != stored_origin:
        # Secrets follow their destination: a header stored for one origin is never sent to another.
        dropped, headers = sorted(set(headers) - set(given)), {}
    if fields.get("clear_headers"):
        headers = {}
    headers.update(given)  # a blank value on the form keeps the stored one
    if server.transport == McpServer.Transport.STDIO:
        headers, server.url = {}, ""
    else:
        server.catalogue_entry = ""
    _check(server, headers)
    server.header_names = sorted(headers)
    server.headers_encrypted = secret_encrypt(plaintext=json.dumps(headers)) if headers else ""
    return dropped


def _save(server: McpServer) -> None:
    server.full_clean()
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise ValidationError({"name": ["an MCP server with this name already exists in the project"]}) from None


def mcp_url_check(*, url: str) -> list[Any]:
    """McpHostNotAllowed unless a worker testing the server may send a request to `url`
    (the egress policy: STUDIO_EGRESS_ALLOWED_HOSTS, STUDIO_MCP_ALLOWED_HOSTS): checked when a server is saved
    and again before every test, where the connection then goes to the address that was checked
    (webapp/execution/mcp_testing.py)."""
    return check_url_allowed(url, egress_policy())


def mcp_server_create(*, user, project: Project, **fields: Any) -> McpServer:
    """`headers` (HTTP): {name: value}, encrypted before it touches the database and never returned."""
    require_role(user=user, project=project, role=Role.EDITOR)
    server = McpServer(project=project, created_by=user if getattr(user, "is_authenticated", False) else None)
    server.headers_dropped = _apply(server, fields)  # type: ignore[attr-defined]
    _save(server)
    return server


def mcp_server_update(*, user, server: McpServer, **fields: Any) -> McpServer:
    """A blank header value keeps the stored one; `clear_headers` removes them all; a URL of another origin
    (scheme, host or port) drops the stored headers not given again (`server.headers_dropped` names them).
    Runs already launched keep the spec they froze."""
    require_role(user=user, project=server.project, role=Role.EDITOR)
    server.headers_dropped = _apply(server, fields)  # type: ignore[attr-defined]
    _save(server)
    return server


def mcp_server_delete(*, user, server: McpServer) -> None:
    """Deletes a server no agent uses. Runs already launched keep the spec they froze, so they show, resume and
    fork as before. An agent that uses the server refuses the deletion, naming the agents: detaching it would
    leave the agent unable to launch."""
    from webapp.selectors.mcp import mcp_server_agents

    require_role(user=user, project=server.project, role=Role.EDITOR)
    # An agent saved with this server between the check and the delete is not caught here: its launch then
    # says plainly that it has no MCP server of the project and to choose one (mcp_agent_environment_options).
    if agents := mcp_server_agents(server=server):
        names = ", ".join(repr(a.name) for a in agents)
        raise ValidationError({"server": [
            f"the MCP server {server.name!r} is used by agent{'s' if len(agents) > 1 else ''} {names}: "
            "choose another server (or environment) for them first, then delete it"]})
    server.delete()


def mcp_server_spec(*, server: McpServer) -> dict[str, Any]:
    """The engine's server spec as a run freezes it: a stdio server's command from the deployment's catalogue;
    header values replaced by the names of the worker environment variables (mcp_server_secrets) the engine
    reads them from."""
    if server.transport == McpServer.Transport.STDIO:
        entry = mcp_catalogue_entries().get(server.catalogue_entry)
        if entry is None:
            raise ValidationError({"catalogue_entry": [
                f"the MCP server {server.name!r} names {server.catalogue_entry or 'no'} stdio server of this "
                f"deployment's catalogue (now: {', '.join(sorted(mcp_catalogue_entries()))}): choose one on its "
                "page"]})
        return {"transport": "stdio", "command": entry.command, "args": list(entry.args), "env": dict(entry.env)}
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


def mcp_server_test_request(*, user, server: McpServer) -> McpServer:
    """Queues a connection test for a worker (webapp/execution/mcp_testing.py): the server is started (stdio)
    or reached (HTTP) in a child process of the executor, never in the web process; the page polls the row.
    A test already queued or running is not queued twice."""
    require_role(user=user, project=server.project, role=Role.EDITOR)
    busy = Q(test_status__in=[McpServer.TestStatus.QUEUED, McpServer.TestStatus.RUNNING],
             test_requested_at__gt=timezone.now() - McpServer.TEST_STALE_AFTER)
    queued = McpServer.objects.filter(pk=server.pk).exclude(busy).update(
        test_status=McpServer.TestStatus.QUEUED, test_error="", test_latency_s=None,
        test_requested_at=timezone.now())
    if queued:
        transaction.on_commit(lambda: work_enqueue(name=MCP_TEST, object_id=server.pk))
    server.refresh_from_db()
    return server


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
