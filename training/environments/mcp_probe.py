"""Lists an MCP server's tools once, in a process of its own: `python -m training.environments.mcp_probe`.

The web app's "Test connection" runs this as a child of a worker (webapp/execution/mcp_testing.py), never in the
web process, with an environment that holds nothing but what the test needs (an HTTP server's header values in
STUDIO_MCP_HEADER_* variables). Protocol: stdin, one JSON line {"server": spec, "startup_timeout_s",
"per_call_timeout_s", "max_result_chars"}; stdout, one JSON line {"ok": true, "tools": [...]} or {"ok": false,
"error": "McpServerExited: ..."}. Never imports Django.
"""
from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pydantic import TypeAdapter

from training.environments.mcp_session import McpServerError, ServerSpec, open_session
from training.environments.process_guard import hide_environment


async def probe(request: dict[str, Any]) -> dict[str, Any]:
    spec = TypeAdapter(ServerSpec).validate_python(request["server"])
    try:
        async with open_session(spec, startup_timeout_s=float(request["startup_timeout_s"]),
                                per_call_timeout_s=float(request["per_call_timeout_s"]),
                                max_result_chars=int(request["max_result_chars"])) as session:
            return {"ok": True, "tools": session.tools}
    except McpServerError as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}


def main() -> int:
    hide_environment()  # an HTTP server's header values: never readable by another process of this user
    try:
        result = asyncio.run(probe(json.loads(sys.stdin.readline())))
    except Exception as err:  # noqa: BLE001 - the parent shows why
        result = {"ok": False, "error": f"{type(err).__name__}: {err}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
