"""One MCP client session (official MCP SDK, client side) and the named faults of a bad server.

A server spec is what a run's config (and later the web app) passes: `{"transport": "stdio", "command": ...,
"args": [...], "env": {...}}` runs the server as a child of the worker; `{"transport": "http", "url": ...,
"headers": {...}}` connects to a streamable-HTTP server. `open_session` yields a `McpSession` whose tools are
already listed, converted to the OpenAI `tools` format and validated; leaving the `async with` closes the
session (and stops a stdio server) on every path: return, exception, cancellation.

Faults are `McpServerError`s (a `TrainingError`, so at launch they refuse the run); the environment turns one
raised mid-run into an error on that trajectory only.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, AsyncIterator, Literal, Union

import anyio
from pydantic import BaseModel, ConfigDict, Field

from training.errors import TrainingError

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style function calling accepts


class McpServerError(TrainingError):
    """A fault of an MCP server; the subclass names which."""


class McpServerDidNotStart(McpServerError):
    pass


class McpServerTimeout(McpServerError):
    pass


class McpServerCrashed(McpServerError):
    pass


class McpProtocolError(McpServerError):
    pass


class McpInvalidToolSchema(McpServerError):
    pass


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

    def all_headers(self) -> dict[str, str]:
        missing = [var for var in self.headers_env.values() if var not in os.environ]
        if missing:
            raise McpServerDidNotStart(f"the environment variable {missing[0]} holding a header of the MCP server "
                                       f"{self.url!r} is not set on this worker")
        return {**self.headers, **{name: os.environ[var] for name, var in self.headers_env.items()}}


ServerSpec = Annotated[Union[StdioServer, HttpServer], Field(discriminator="transport")]


@dataclass
class ToolResult:
    content: str  # what the agent sees as the `tool` message
    is_error: bool


def openai_tools(listed: list[Any]) -> list[dict[str, Any]]:
    """MCP tools → OpenAI `tools`; a tool whose name or input schema a model cannot be given is refused."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    tools = []
    for tool in listed:
        if not TOOL_NAME.match(tool.name):
            raise McpInvalidToolSchema(f"the server lists a tool named {tool.name[:80]!r}: tool names must be 1-64 "
                                       "letters, digits, _ or -")
        schema = tool.input_schema
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as err:
            raise McpInvalidToolSchema(f"tool {tool.name!r} has an invalid input schema: {err.message[:300]}") \
                from None
        if schema.get("type") != "object":
            raise McpInvalidToolSchema(f"tool {tool.name!r} has an input schema of type {schema.get('type')!r}; "
                                       "tool arguments must be an object")
        tools.append({"type": "function", "function": {
            "name": tool.name, "description": tool.description or "", "parameters": schema}})
    return tools


def result_text(result: Any, max_chars: int) -> ToolResult:
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'unknown')} content omitted]")
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}… [{len(text) - max_chars} more characters cut]"
    return ToolResult(f"error: {text}" if result.is_error else text, bool(result.is_error))


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

    async def on_message(self, message: Any) -> None:
        """The SDK's message handler: a line that is not JSON-RPC arrives here, not at the call waiting for its
        answer, so the call is cancelled at once rather than left to time out."""
        if isinstance(message, Exception):
            self._garbage = message
            if self._in_flight is not None:
                self._in_flight.cancel()

    def server_output(self) -> str:
        """The tail of a stdio server's stderr (for error messages; never shown unescaped)."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        tail = self._stderr.read()[-600:].strip()
        return f"; its stderr ends: {tail}" if tail else ""

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
            if _is_protocol_garbage(err):
                self.broken = McpProtocolError(f"tool {name!r}: the server sent a message that is not valid MCP "
                                               f"JSON-RPC ({_first_line(err)})")
            else:
                self.broken = McpServerCrashed(f"tool {name!r}: the server went away ({_first_line(err)})"
                                               f"{self.server_output()}")
        else:
            return result_text(result, self._max_chars)
        raise self.broken


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def _transport(stack: AsyncExitStack, spec: StdioServer | HttpServer, timeout_s: float) -> tuple[Any, Any]:
    if isinstance(spec, StdioServer):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        stderr = stack.enter_context(tempfile.TemporaryFile("w+", prefix="mcp-stderr-"))
        params = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env or None)
        try:
            streams = await stack.enter_async_context(stdio_client(params, errlog=stderr))
        except (OSError, ValueError) as err:
            raise McpServerDidNotStart(f"cannot run the MCP server command {spec.command!r}: {err}") from None
        return streams, stderr
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(httpx2.AsyncClient(
        headers=spec.all_headers(), timeout=httpx2.Timeout(timeout_s, read=max(timeout_s, 300.0))))
    return await stack.enter_async_context(streamable_http_client(spec.url, http_client=http)), None


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

    streams, stderr = await _transport(stack, spec, per_call_timeout_s)
    mcp = McpSession(None, [], per_call_timeout_s=per_call_timeout_s, max_result_chars=max_result_chars,
                     limit=limit, stderr=stderr)
    session = mcp._session = await stack.enter_async_context(
        ClientSession(streams[0], streams[1], message_handler=mcp.on_message))
    try:
        with anyio.fail_after(startup_timeout_s):
            await session.initialize()
            listed = (await session.list_tools()).tools
    except TimeoutError:
        raise McpServerDidNotStart(f"the MCP server {where!r} did not complete its handshake and tool listing "
                                   f"within {startup_timeout_s:g} s (startup_timeout_s){mcp.server_output()}") \
            from None
    except Exception as err:  # noqa: BLE001 - any failure before the tools are listed means it did not start
        kind = McpProtocolError if _is_protocol_garbage(err) else McpServerDidNotStart
        raise kind(f"the MCP server {where!r} did not start: {_first_line(err)}{mcp.server_output()}") from None
    mcp.tools = openai_tools(listed)
    return mcp
