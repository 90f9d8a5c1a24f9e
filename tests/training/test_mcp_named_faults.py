"""Issue 34, item 3, at the engine: each way an MCP server fails to start is named by its cause, not lumped into
"did not start, or could not be reached": a stdio program that exits (its exit code and last stderr line, a
missing command included), a URL that answers but not as MCP (a 404, a web page), one that wants credentials,
and a server that never answers (timed out)."""
from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.training.mcp_helpers import FAULT_SERVER
from training.environments.mcp_session import (
    HttpServer, McpNotMcp, McpProgramNotMcp, McpServerDidNotStart, McpServerExited, McpStartTimeout, StdioServer,
    open_session,
)


def start(spec, timeout_s: float = 20.0) -> None:
    async def go() -> None:
        async with open_session(spec, startup_timeout_s=timeout_s, per_call_timeout_s=timeout_s,
                                max_result_chars=4000):
            pass

    asyncio.run(go())


class Answering:
    """An HTTP server that answers every request with one status and content type."""

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"

    def __enter__(self) -> "Answering":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_program_that_exits_is_named_with_its_exit_code_and_last_stderr_line():
    with pytest.raises(McpServerExited, match="exited with code 3 before it answered the handshake; its last "
                                              "stderr line: fault server: refusing to start"):
        start(StdioServer(transport="stdio", command=sys.executable, args=[FAULT_SERVER, "exit"]))


def test_a_missing_command_is_named_with_exit_code_127():
    with pytest.raises(McpServerExited, match="exited with code 127: cannot run the MCP server command "
                                              "'/nonexistent/mcp': No such file or directory"):
        start(StdioServer(transport="stdio", command="/nonexistent/mcp"))


@pytest.mark.parametrize("status, content_type, body, says", [
    (404, "text/html", b"<html>Not Found</html>", "answered 404 Not Found (text/html)"),
    (200, "text/html", b"<!doctype html><title>Welcome</title>", "answered 200 OK (text/html)"),
])
def test_a_url_that_answers_but_not_as_mcp_is_named_not_mcp(status, content_type, body, says):
    with Answering(status, content_type, body) as server, \
            pytest.raises(McpNotMcp, match=re.escape(f"not an MCP endpoint: it {says}")):
        start(HttpServer(transport="http", url=server.url))


def test_a_url_that_wants_credentials_is_named_so():
    with Answering(401, "application/json", b'{"error": "unauthorized"}') as server, \
            pytest.raises(McpServerDidNotStart, match="refused the request: it answered 401 Unauthorized"):
        start(HttpServer(transport="http", url=server.url))


def test_a_server_that_never_answers_is_named_timed_out():
    with pytest.raises(McpStartTimeout, match="timed out: no handshake and tool listing within 3 s"):
        start(StdioServer(transport="stdio", command=sys.executable, args=[FAULT_SERVER, "silent"]), timeout_s=3)


@pytest.mark.parametrize("then", ["import time; time.sleep(60)", "pass"], ids=["keeps running", "exits"])
def test_a_program_that_prints_plain_text_is_named_not_an_mcp_server_at_once_not_timed_out(then):
    program = f"print('Serving the web app on port 8000', flush=True); {then}"
    started = time.monotonic()
    with pytest.raises(McpProgramNotMcp, match=re.escape(
            "is not an MCP server: it wrote 'Serving the web app on port 8000' to its standard output")):
        start(StdioServer(transport="stdio", command=sys.executable, args=["-c", program]), timeout_s=20)
    assert time.monotonic() - started < 10  # named when the line came, not when the startup timeout ran out
