"""docs/mcp.md's mailbox commands work as written (issue 34, item 5): each command of its table is run from the
repository root exactly as the page spells it, and the stdio spec of its JSON examples ("command": "python")
starts the server even where the first `python` on PATH is not the one with the MCP SDK."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.training.mcp_helpers import free_port
from training.environments.mcp_session import StdioServer, open_session

ROOT = Path(__file__).resolve().parents[2]
TABLE_ROW = re.compile(r"^\| `(\.venv/bin/python -m training\.environments\.mailbox_server [^`]*)` \|", re.M)
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "docs-test", "version": "1"}}}


def documented_commands() -> dict[str, str]:
    commands = TABLE_ROW.findall((ROOT / "docs" / "mcp.md").read_text())
    return {next(flag for flag in ("stdio", "http", "write-scenarios") if flag in c): c for c in commands}


def test_the_documented_stdio_command_answers_the_mcp_handshake():
    command = documented_commands()["stdio"]
    done = subprocess.run(command, shell=True, cwd=ROOT, input=json.dumps(INITIALIZE) + "\n", capture_output=True,
                          text=True, timeout=120)
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 0 and "serverInfo" in answer["result"], done.stderr[-2000:]


def test_the_documented_scenarios_command_writes_the_scenarios(tmp_path):
    command = documented_commands()["write-scenarios"].replace("FILE.jsonl", str(tmp_path / "mail.jsonl"))
    subprocess.run(command, shell=True, cwd=ROOT, check=True, capture_output=True, timeout=120)
    rows = [json.loads(line) for line in (tmp_path / "mail.jsonl").read_text().splitlines()]
    assert len(rows) == 100 and rows[0]["reference"]


def test_the_documented_http_command_listens_where_the_page_says():
    port = free_port()
    command = documented_commands()["http"].replace("8765", str(port))
    process = subprocess.Popen(command, shell=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode()[-2000:] if process.stderr else ""
                assert time.monotonic() < deadline, "the documented HTTP command did not listen within 60 s"
                time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_python_in_a_stdio_spec_is_the_engines_interpreter_whatever_path_finds_first(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a system Python first (no MCP SDK), or none at all
    spec = StdioServer(transport="stdio", command="python", args=["-m", "training.environments.mailbox_server"])

    async def listed() -> list[str]:
        async with open_session(spec, startup_timeout_s=60, per_call_timeout_s=60, max_result_chars=4000) as s:
            return [t["function"]["name"] for t in s.tools]

    assert asyncio.run(listed()) == ["search_inbox", "read_email", "answer"]
