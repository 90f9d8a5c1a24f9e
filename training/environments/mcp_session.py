"""One MCP client session (official MCP SDK, client side) and the named faults of a bad server.

A server spec is what a run's config (and later the web app) passes: `{"transport": "stdio", "command": ...,
"args": [...], "env": {...}}` runs the server as a child of the worker; `{"transport": "http", "url": ...,
"headers": {...}}` connects to a streamable-HTTP server. `open_session` yields a `McpSession` whose tools are
already listed, converted to the OpenAI `tools` format and validated; leaving the `async with` closes the
session (and stops a stdio server) on every path: return, exception, cancellation.

Faults are `McpServerError`s (a `TrainingError`, so at launch they refuse the run); the environment turns one
raised mid-run into an error on that trajectory only. Each names its cause: a stdio server that exited (its code
and last stderr line), a URL that is not MCP (a 404, an HTML page), a timeout, bytes that are not UTF-8 (at once,
not after the startup timeout), more tools than MAX_TOOLS or a tool larger than the caps (mcp_tools.py).

A stdio server runs through mcp_sandbox.py: a scrubbed environment, its own process group, CPU, memory and
wall-time limits ($STUDIO_MCP_CPU_S, $STUDIO_MCP_MEMORY_MB, $STUDIO_MCP_WALL_S), and another user where the
deployment names one ($STUDIO_MCP_RUN_AS). An HTTP server's connections go to `connect_to` when it is given (the
address the web app checked; DNS is not asked again, so a name cannot be rebound to another address meanwhile);
otherwise each request's host passes the egress policy (egress/, from the environment the web app gives the engine)
and the connection goes to the address that was checked.
"""
from __future__ import annotations

import codecs
import json
import os
import sys
import tempfile
from contextvars import ContextVar
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any, AsyncIterator, Literal, Union

import anyio
from pydantic import BaseModel, ConfigDict, Field

from training.environments.mcp_sandbox import MARK as SANDBOX_MARK, RUN_AS_ENV
from training.environments.mcp_faults import (  # noqa: F401 - the faults are named from here too
    McpInvalidToolSchema, McpInvalidUtf8, McpNotMcp, McpProgramNotMcp, McpProtocolError, McpServerCrashed,
    McpServerDidNotStart, McpServerError, McpServerExited, McpServerTimeout, McpStartTimeout, McpToolsTooLarge)
from training.environments.mcp_tools import ToolResult, openai_tools, result_text

SANDBOX_LIMITS = (("STUDIO_MCP_CPU_S", "--cpu-s", "600"), ("STUDIO_MCP_MEMORY_MB", "--memory-mb", "2048"),
                  ("STUDIO_MCP_WALL_S", "--wall-s", "3600"))


class StdioServer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    transport: Literal["stdio"]
    command: str = Field(min_length=1, description="The program the worker runs (it speaks MCP on stdin/stdout).")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="Added to a minimal environment (PATH, HOME…).")


class HttpServer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    transport: Literal["http"]
    url: str = Field(pattern=r"^https?://", description="The streamable-HTTP endpoint, e.g. http://host:8765/mcp.")
    headers: dict[str, str] = Field(default_factory=dict, description="Sent with every request (e.g. a token).")
    # Secret header values stay out of the config: header name -> the worker's environment variable holding it.
    # Only STUDIO_MCP_* variables, so a config can never send the worker's other variables to a server.
    headers_env: dict[str, Annotated[str, Field(pattern=r"^STUDIO_MCP_[A-Z0-9_]+$")]] = Field(
        default_factory=dict, description="Header name -> a STUDIO_MCP_* environment variable holding its value.")
    connect_to: str | None = Field(None, description="Connect to this IP address instead of resolving the URL's "
                                   "host (the address that was checked); the Host header and TLS name stay the URL's.")

    def all_headers(self) -> dict[str, str]:
        missing = [var for var in self.headers_env.values() if var not in os.environ]
        if missing:
            raise McpServerDidNotStart(f"the environment variable {missing[0]} holding a header of the MCP server "
                                       f"{self.url!r} is not set on this worker")
        return {**self.headers, **{name: os.environ[var] for name, var in self.headers_env.items()}}


ServerSpec = Annotated[Union[StdioServer, HttpServer], Field(discriminator="transport")]


def _is_protocol_garbage(err: BaseException) -> bool:
    from pydantic import ValidationError

    chain = [err, *getattr(err, "exceptions", []), err.__cause__, err.__context__]
    return any(isinstance(e, (ValidationError, json.JSONDecodeError)) for e in chain if e is not None)


def _first_line(err: BaseException) -> str:
    leaves = getattr(err, "exceptions", None)
    if leaves:  # an exception group from the SDK's task groups: its first leaf says what happened
        return _first_line(leaves[0])
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__


class McpSession:
    def __init__(self, session: Any, tools: list[dict[str, Any]], *, per_call_timeout_s: float,
                 max_result_chars: int, limit: anyio.Semaphore | None, stderr: Any) -> None:
        self._session, self.tools = session, tools
        self._timeout, self._max_chars, self._limit, self._stderr = per_call_timeout_s, max_result_chars, limit, stderr
        self.broken: McpServerError | None = None  # set once the server failed; the session takes no more calls
        self._garbage: Exception | None = None
        self._in_flight: anyio.CancelScope | None = None
        self._starting: anyio.CancelScope | None = None
        self.http_answer: str = ""  # an HTTP server's first answer that is not MCP: "404 Not Found (text/html)"
        self.http_status = 0

    def on_invalid_utf8(self, err: UnicodeDecodeError) -> None:
        """A stdio server wrote bytes that are not UTF-8: named at once, whatever was waiting for an answer."""
        if self._garbage is None:
            self._garbage = McpInvalidUtf8(f"the server wrote bytes that are not UTF-8 to its standard output "
                                           f"({err.object[err.start:err.end][:8]!r}): MCP messages are UTF-8 JSON")
        for scope in (self._in_flight, self._starting):
            if scope is not None:
                scope.cancel()

    async def on_http_response(self, response: Any) -> None:
        """The HTTP client's response hook: remembers an answer that says the URL is not an MCP endpoint."""
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if not self.http_answer and (response.status_code >= 400 or kind == "text/html"):
            self.http_status = response.status_code
            self.http_answer = f"{response.status_code} {response.reason_phrase}".strip() + (
                f" ({kind})" if kind else "")

    async def on_message(self, message: Any) -> None:
        """The SDK's message handler: a line that is not JSON-RPC arrives here, not at the call waiting for its
        answer, so the call (or the start) is cancelled at once rather than left to time out."""
        if isinstance(message, Exception):
            self._garbage = message
            for scope in (self._in_flight, self._starting):
                if scope is not None:
                    scope.cancel()

    def _stderr_lines(self) -> list[str]:
        if self._stderr is None:
            return []
        self._stderr.flush()
        self._stderr.seek(0)
        return [line for line in self._stderr.read()[-4000:].splitlines() if line.strip()]

    def server_output(self) -> str:
        """The tail of a stdio server's stderr (for error messages; never shown unescaped)."""
        lines = [line for line in self._stderr_lines() if not line.startswith(SANDBOX_MARK)]
        tail = "\n".join(lines)[-600:].strip()
        return f"; its stderr ends: {tail}" if tail else ""

    def exit_status(self) -> str | None:
        """'exited with code 3' (or 'killed by signal …') once the sandbox reported the server's end."""
        for line in reversed(self._stderr_lines()):
            if line.startswith(SANDBOX_MARK):
                return line[len(SANDBOX_MARK):].strip()
        return None

    def last_stderr_line(self) -> str:
        lines = [line for line in self._stderr_lines() if not line.startswith(SANDBOX_MARK)]
        return lines[-1].strip()[:300] if lines else ""

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Runs a tool. A tool's own error is a normal result; a server fault raises a McpServerError."""
        if self.broken is not None:
            raise self.broken
        try:
            async with self._limit if self._limit is not None else _nothing():
                with anyio.CancelScope() as self._in_flight:
                    if self._garbage is None:
                        with anyio.fail_after(self._timeout):
                            result = await self._session.call_tool(name, arguments)
                self._in_flight = None
            if self._garbage is not None:
                raise self._garbage
        except TimeoutError:
            self.broken = McpServerTimeout(f"tool {name!r} did not answer within {self._timeout:g} s "
                                           "(per_call_timeout_s)")
        except Exception as err:  # noqa: BLE001 - whatever the SDK raises, the server is no longer usable
            if isinstance(err, McpServerError):  # named already (bytes that are not UTF-8)
                self.broken = err
            elif _is_protocol_garbage(err):
                self.broken = McpProtocolError(f"tool {name!r}: the server sent a message that is not valid MCP "
                                               f"JSON-RPC ({_first_line(err)})")
            else:
                status = self.exit_status()
                self.broken = McpServerCrashed(f"tool {name!r}: the server went away ({status or _first_line(err)})"
                                               f"{self.server_output()}")
        else:
            return result_text(result, self._max_chars)
        raise self.broken


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _on_bad_utf8(err: UnicodeError) -> tuple[str, int]:
    watch = _utf8_watch.get()
    if watch is not None and isinstance(err, UnicodeDecodeError):
        watch(err)
    return "\ufffd", err.end  # type: ignore[attr-defined]


# The stdio transport decodes the server's stdout in a task of its own: this codec error handler reaches the
# session of the task that started it (the context is copied when the task starts), so the session is told.
_utf8_watch: ContextVar[Any] = ContextVar("mcp_utf8_watch", default=None)
UTF8_HANDLER = "studio-mcp-utf8"
codecs.register_error(UTF8_HANDLER, _on_bad_utf8)


def sandbox_command(spec: StdioServer) -> tuple[str, list[str], dict[str, str]]:
    """The wrapper's command line and the server's scrubbed environment (mcp_sandbox.py)."""
    from mcp.client.stdio import get_default_environment

    from training.environments import mcp_sandbox

    args = ["-S", mcp_sandbox.__file__]
    for variable, flag, default in SANDBOX_LIMITS:
        args += [flag, os.environ.get(variable, default)]
    env = {**get_default_environment(), "PYTHONUNBUFFERED": "1", **spec.env}
    if os.environ.get(RUN_AS_ENV):
        env[RUN_AS_ENV] = os.environ[RUN_AS_ENV]
    return sys.executable, [*args, "--", server_program(spec.command), *spec.args], env


def server_program(command: str) -> str:
    """`python` (or `python3`) in a spec is the engine's own interpreter, the one with the MCP SDK and this
    package installed: the first `python` on a worker's PATH may be another (issue 34: the documented command
    failed with "No module named 'mcp'")."""
    return sys.executable if command in ("python", "python3") else command


class _PinnedTransport:
    """An httpx transport that connects to one address for the URL's host (its TLS name and Host header kept)."""

    def __init__(self, inner: Any, host: str, address: str) -> None:
        self._inner, self._host, self._address = inner, host, address

    async def handle_async_request(self, request: Any) -> Any:
        if request.url.host == self._host:
            request.extensions = {**request.extensions, "sni_hostname": self._host}
            request.url = request.url.copy_with(host=self._address)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> "_PinnedTransport":
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._inner.__aexit__(*exc)


async def _transport(stack: AsyncExitStack, spec: StdioServer | HttpServer, timeout_s: float,
                     mcp: McpSession) -> Any:
    if isinstance(spec, StdioServer):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        mcp._stderr = stack.enter_context(tempfile.TemporaryFile("w+", prefix="mcp-stderr-"))
        command, args, env = sandbox_command(spec)
        params = StdioServerParameters(command=command, args=args, env=env)
        params.encoding_error_handler = UTF8_HANDLER  # type: ignore[assignment]  # the SDK's type lists three
        token = _utf8_watch.set(mcp.on_invalid_utf8)
        try:
            return await stack.enter_async_context(stdio_client(params, errlog=mcp._stderr))
        except (OSError, ValueError) as err:
            raise McpServerDidNotStart(f"cannot run the MCP server command {spec.command!r}: {err}") from None
        finally:
            _utf8_watch.reset(token)
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    if spec.connect_to:
        from urllib.parse import urlsplit

        transport: Any = _PinnedTransport(httpx2.AsyncHTTPTransport(), urlsplit(spec.url).hostname or "",
                                          spec.connect_to)
    else:  # each request's host checked against the egress policy and connected to as checked (egress/)
        from egress import PinnedAsyncTransport

        transport = PinnedAsyncTransport(inner=httpx2.AsyncHTTPTransport)
    http = await stack.enter_async_context(httpx2.AsyncClient(
        headers=spec.all_headers(), timeout=httpx2.Timeout(timeout_s, read=max(timeout_s, 300.0)),
        transport=transport, event_hooks={"response": [mcp.on_http_response]}))
    return await stack.enter_async_context(streamable_http_client(spec.url, http_client=http))


@asynccontextmanager
async def open_session(spec: StdioServer | HttpServer, *, startup_timeout_s: float, per_call_timeout_s: float,
                       max_result_chars: int, limit: anyio.Semaphore | None = None,
                       starts: anyio.Semaphore | None = None) -> AsyncIterator[McpSession]:
    """One session; `limit` bounds the calls in flight and `starts` the sessions starting, both shared by the
    sessions of a run. The startup timeout counts from when this start gets its turn."""
    where = spec.command if isinstance(spec, StdioServer) else spec.url
    listed = False
    body_error: BaseException | None = None
    try:
        async with AsyncExitStack() as stack:
            async with starts if starts is not None else _nothing():
                mcp = await _start(stack, spec, where, startup_timeout_s=startup_timeout_s,
                                   per_call_timeout_s=per_call_timeout_s, max_result_chars=max_result_chars,
                                   limit=limit)
            listed = True
            try:
                yield mcp
            except BaseException as err:
                body_error = err
                raise
    except BaseException as raised:  # noqa: BLE001 - the SDK's task groups wrap what happened; name it
        err = raised
        while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
            err = err.exceptions[0]
        if err is body_error or isinstance(err, McpServerError) or not isinstance(err, Exception):
            raise err from None
        if not listed:  # e.g. an HTTP server that is not there: the transport's own task fails
            raise McpServerDidNotStart(f"the MCP server {where!r} did not start: {_first_line(err)}") from None
        raise McpServerCrashed(f"the MCP server {where!r} went away: {_first_line(err)}") from None


async def _start(stack: AsyncExitStack, spec: StdioServer | HttpServer, where: str, *, startup_timeout_s: float,
                 per_call_timeout_s: float, max_result_chars: int, limit: anyio.Semaphore | None) -> McpSession:
    from mcp.client.session import ClientSession

    mcp = McpSession(None, [], per_call_timeout_s=per_call_timeout_s, max_result_chars=max_result_chars,
                     limit=limit, stderr=None)
    streams = await _transport(stack, spec, per_call_timeout_s, mcp)
    session = mcp._session = await stack.enter_async_context(
        ClientSession(streams[0], streams[1], message_handler=mcp.on_message))
    listed: list[Any] | None = None
    try:
        with anyio.CancelScope() as mcp._starting:
            with anyio.fail_after(startup_timeout_s):
                await session.initialize()
                listed = (await session.list_tools()).tools
    except TimeoutError:
        raise McpStartTimeout(f"the MCP server {where!r} timed out: no handshake and tool listing within "
                              f"{startup_timeout_s:g} s (startup_timeout_s){mcp.server_output()}") from None
    except Exception as err:  # noqa: BLE001 - any failure before the tools are listed means it did not start
        raise _start_failure(mcp, spec, where, err) from None
    finally:
        mcp._starting = None
    if mcp._garbage is not None:
        raise _garbage_at_start(mcp, spec, where)
    if listed is None:
        raise McpServerDidNotStart(f"the MCP server {where!r} did not start")
    mcp.tools = openai_tools(listed)
    return mcp


def _start_failure(mcp: McpSession, spec: StdioServer | HttpServer, where: str, err: Exception) -> McpServerError:
    """The named cause of a start that failed: not UTF-8, exited (code, last stderr line), not MCP, garbage."""
    if mcp._garbage is not None:  # what it printed says more than that it then exited
        return _garbage_at_start(mcp, spec, where)
    if isinstance(spec, StdioServer) and (status := mcp.exit_status()) is not None:
        line = mcp.last_stderr_line()
        return McpServerExited(f"the MCP server {where!r} {status} before it answered the handshake"
                               + (f"; its last stderr line: {line}" if line else "; it wrote nothing to stderr"))
    if mcp.http_status in (401, 403):
        return McpServerDidNotStart(f"the MCP server {where!r} refused the request: it answered {mcp.http_answer}; "
                                    "check the server's headers (a token it expects)")
    if mcp.http_answer:
        return McpNotMcp(f"the URL {where!r} is not an MCP endpoint: it answered {mcp.http_answer} (an MCP "
                         "server answers JSON or an event stream, usually at a path ending in /mcp)")
    if _is_protocol_garbage(err):
        return McpProtocolError(f"the MCP server {where!r} did not start: {_first_line(err)}{mcp.server_output()}")
    return McpServerDidNotStart(f"the MCP server {where!r} did not start: {_first_line(err)}{mcp.server_output()}")


def _garbage_at_start(mcp: McpSession, spec: StdioServer | HttpServer, where: str) -> McpServerError:
    """A start that met a message of no MCP: a stdio program printing ordinary text is named not an MCP server
    (people point the command at the wrong program), never a timeout to lengthen."""
    garbage = mcp._garbage
    if isinstance(garbage, McpServerError):
        return garbage
    if isinstance(spec, StdioServer) and garbage is not None and _is_protocol_garbage(garbage):
        return McpProgramNotMcp(
            f"the program {where!r} is not an MCP server: it wrote {_garbage_line(garbage)!r} to its standard "
            "output, where an MCP server writes only JSON-RPC messages (a server that logs must log to stderr)")
    return McpProtocolError(f"the MCP server {where!r} did not start: it sent a message that is not valid MCP "
                            f"JSON-RPC ({_first_line(garbage) if garbage else 'no details'})")


def _garbage_line(err: BaseException) -> str:
    """The start of the line the SDK could not read as JSON-RPC (pydantic keeps it as the error's input)."""
    from pydantic import ValidationError

    for e in (err, err.__cause__, err.__context__):
        if isinstance(e, ValidationError) and e.errors():
            return str(e.errors()[0].get("input", ""))[:120]
        if isinstance(e, json.JSONDecodeError):
            return e.doc[:120]
    return _first_line(err)[:120]
