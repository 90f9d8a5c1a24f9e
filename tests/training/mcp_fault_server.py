"""A real MCP server process with faults on demand, for the `mcp` environment's fault tests.

`python mcp_fault_server.py MODE` serves over stdio. MODE: ok | exit (dies before the handshake) |
silent (never answers the handshake) | slow (starts serving after 1 s) | bad_schema (lists a tool whose input
schema is invalid) | nul (echo's description holds U+0000) | bad_utf8 (answers the handshake with bytes that are
not UTF-8) | environ (writes its own and its ancestors' environments to $FAULT_SERVER_DUMP, then serves one tool by
hand, standard library only) |
many_tools (3000 tools) | long_description (echo's description is 30000 characters). $FAULT_SERVER_STARTS names a file it appends its start time to.
$FAULT_SERVER_PIDS names a file it appends its pid to. Its tools: echo(text), nap(seconds) (returns its start and end times), fail() (a tool error), hang() (never returns), crash() (the process dies mid-call),
garbage() (writes a line that is not JSON-RPC to stdout, then nothing).
"""
from __future__ import annotations

import json
import os
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if os.environ.get("FAULT_SERVER_PIDS"):  # tests check that every server they started was stopped
    with open(os.environ["FAULT_SERVER_PIDS"], "a") as f:
        f.write(f"{os.getpid()}\n")


def serve_by_hand(count: int) -> None:
    """The handshake and a list of `count` echo-like tools, spoken without the SDK (standard library only: any
    Python runs it, and the SDK takes tens of seconds to register thousands of tools on a busy machine)."""
    for raw in sys.stdin:
        request = json.loads(raw)
        if "id" not in request:
            continue
        if request["method"] == "initialize":
            result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "by-hand", "version": "1"}}
        else:
            result = {"tools": [{"name": f"tool_{i}", "description": f"Tool number {i}: echoes the text.",
                                 "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
                                for i in range(count)]}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n")
        sys.stdout.flush()
    sys.exit(0)


if mode == "bad_utf8":  # a line that is not UTF-8 where the handshake's answer belongs
    sys.stdin.readline()
    os.write(1, b'{"jsonrpc": "2.0", "id": 0, "result": "\xff\xfe caf\xe9"}\n')
    time.sleep(3600)
if mode == "environ":  # what a server can find of the processes above it: its own and its ancestors' environment
    with open(os.environ["FAULT_SERVER_DUMP"], "wb") as dump:
        pid = os.getpid()
        while pid > 1:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    dump.write(f.read() + b"\n")
            except OSError as err:
                dump.write(f"pid {pid}: {err}\n".encode())
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
    serve_by_hand(1)
if mode == "many_tools":  # 3000 tools: a page of megabytes, and every prompt would carry them
    serve_by_hand(3000)
if mode == "exit":
    print("fault server: refusing to start", file=sys.stderr)
    sys.exit(3)
if os.environ.get("FAULT_SERVER_STARTS"):
    with open(os.environ["FAULT_SERVER_STARTS"], "a") as f:
        f.write(f"{time.time()}\n")
if mode == "silent":
    time.sleep(3600)
if mode == "slow":
    time.sleep(1.0)

from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

server = MCPServer("faults", log_level="ERROR")
WIRE = os.dup(1)  # the SDK moves the protocol stream off fd 1 to protect it; this copy still reaches the client


@server.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text


@server.tool()
async def nap(seconds: float) -> str:
    """Sleeps, then says when it started and ended."""
    import anyio

    start = time.time()
    await anyio.sleep(seconds)
    return f"{start} {time.time()}"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ToolError("the disk is full")


@server.tool()
async def hang() -> str:
    """Never returns."""
    import anyio

    await anyio.sleep(3600)
    return "never"


@server.tool()
def crash() -> str:
    """The process dies."""
    os._exit(7)


@server.tool()
def garbage() -> str:
    """Writes garbage to the protocol stream."""
    os.write(WIRE, b"this is {not json-rpc\n")
    time.sleep(3600)
    return "never"


if mode == "bad_schema":
    server._tool_manager.get_tool("echo").parameters = {"type": "object", "properties": {"text": {"type": 12}}}
if mode == "long_description":
    server._tool_manager.get_tool("echo").description = "Echo the text. " * 2000
if mode == "nul":
    server._tool_manager.get_tool("echo").description = "Echo\x00 the text."

server.run("stdio")
