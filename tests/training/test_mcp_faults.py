"""Each MCP server fault, injected into a real server process: a named error, and nothing lost.

At launch a fault refuses the run with a named McpServerError; mid-rollout it ends that trajectory with the
error recorded and its messages kept; every server process a test started is stopped, cancel included. The
rows go to the `MCP fault table` that the terminal summary prints (tests/training/conftest.py).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.training.mcp_helpers import FAULT_SERVER, alive, free_port, launch, options, rollout, stdio
from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment
from training.environments.mcp_session import (McpInvalidToolSchema, McpProtocolError, McpServerCrashed,
                                               McpServerDidNotStart, McpServerTimeout)
from training.types import Scenario


def fault_server(mode: str, pids: Path) -> dict:
    return stdio([FAULT_SERVER, mode], {"FAULT_SERVER_PIDS": str(pids)})


def started(pids: Path) -> list[int]:
    return [int(p) for p in pids.read_text().split()] if pids.exists() else []


@pytest.mark.parametrize("fault, server, startup_s, error, says", [
    ("server exits before the handshake", "exit", 30, McpServerDidNotStart, "refusing to start"),
    ("server never answers the handshake", "silent", 3, McpServerDidNotStart, "within 3 s"),
    ("tool with an invalid input schema", "bad_schema", 30, McpInvalidToolSchema, "tool 'echo' has an invalid input"),
])
def test_a_server_that_fails_at_launch_refuses_the_run(fault, server, startup_s, error, says, tmp_path, fault_table):
    pids = tmp_path / "pids"
    with pytest.raises(error, match=says):
        launch(options(fault_server(server, pids), startup_timeout_s=startup_s))
    assert started(pids) and not any(alive(p) for p in started(pids))
    fault_table.append((fault, f"run refused: {error.__name__}", "no run started; server stopped"))


def test_a_command_that_does_not_exist_and_an_http_server_that_is_not_there_refuse_the_run(fault_table):
    with pytest.raises(McpServerDidNotStart, match="cannot run the MCP server command"):
        launch(options(stdio([]) | {"command": "/nonexistent/mcp-server"}))
    with pytest.raises(McpServerDidNotStart, match="did not start"):
        launch(options({"transport": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"}, startup_timeout_s=5))
    fault_table.append(("command missing / HTTP server down", "run refused: McpServerDidNotStart",
                        "no run started"))


@pytest.mark.parametrize("fault, tool, error, says", [
    ("server hangs in a tool call", "hang", McpServerTimeout, "did not answer within 2 s"),
    ("server crashes mid-run", "crash", McpServerCrashed, "the server went away"),
    ("server writes protocol garbage", "garbage", McpProtocolError, "not valid MCP JSON-RPC"),
])
def test_a_fault_mid_rollout_marks_the_trajectory_and_keeps_its_messages(fault, tool, error, says, tmp_path,
                                                                        fault_table):
    pids = tmp_path / "pids"
    opts = options(fault_server("ok", pids), per_call_timeout_s=2, reward="reference")
    replies = [[("echo", {"text": "before"})], [(tool, {})], "never asked"]
    trajectory, requests = rollout(opts, replies, Scenario(id="s", user_message="q", reference="r"))
    assert trajectory.error.startswith(f"{error.__name__}: ") and says in trajectory.error
    assert trajectory.metadata["mcp_fault"] == error.__name__
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "tool", "assistant"]
    assert trajectory.messages[2]["content"] == "before"
    assert trajectory.messages[3]["tool_calls"][0]["function"]["name"] == tool
    assert len(requests) == 2 and trajectory.env_reward == 0.0  # scored, and never trained on (error is set)
    assert started(pids) and not any(alive(p) for p in started(pids))
    fault_table.append((fault, f"trajectory error: {error.__name__}", "messages kept; server stopped"))


def test_a_tool_error_is_an_ordinary_tool_message_not_a_fault(tmp_path, fault_table):
    trajectory, _ = rollout(options(fault_server("ok", tmp_path / "pids")), [[("fail", {})], "sorry"])
    assert trajectory.error is None
    assert trajectory.messages[2]["content"].startswith("error: ") and "the disk is full" in \
        trajectory.messages[2]["content"]
    assert trajectory.messages[-1]["content"] == "sorry"
    fault_table.append(("tool returns an error", "tool message 'error: …'; rollout goes on", "whole trajectory"))


def test_cancelling_a_rollout_stops_its_server(tmp_path, fault_table):
    pids = tmp_path / "pids"
    opts = options(fault_server("ok", pids), per_call_timeout_s=60)

    async def go() -> None:
        task = asyncio.create_task(get_environment("mcp").rollout(
            scripted_client([[("hang", {})]]), MODEL, Scenario(id="s", user_message="q"),
            RolloutConfig("", SamplingConfig(), opts)))
        for _ in range(300):
            await asyncio.sleep(0.1)
            if started(pids):
                break
        await asyncio.sleep(1.0)  # the call is in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert started(pids) and not any(alive(p) for p in started(pids))
    fault_table.append(("rollout cancelled mid-call", "CancelledError propagates", "server stopped"))




def test_a_run_on_a_server_that_does_not_start_is_refused_before_anything_loads(tiny_model_dir, tmp_path):
    from tests.training.configs import small_config
    from training import run

    config = small_config(tiny_model_dir, tmp_path / "run", steps=1, environment={
        "kind": "mcp", "options": {"server": fault_server("exit", tmp_path / "pids")}})
    events: list = []
    with pytest.raises(McpServerDidNotStart, match="refusing to start"):
        run(config, sink=events.append)
    assert events == []  # not even RunStarted: no model loaded, no server started, nothing to clean up


def test_an_http_server_that_dies_mid_run_marks_the_trajectory(fault_table):
    from tests.training.mcp_helpers import start_http_mailbox

    from training.environments.mailbox_server.mailbox import Mailbox, generate

    hit = Mailbox(generate(0)[0]).search(keywords="Raven")[0]["id"]  # what the served mailbox answers
    port = free_port()
    server = start_http_mailbox(port)

    def die_then_read() -> list:
        server.kill()
        server.wait(timeout=30)
        return [("read_email", {"id": hit})]

    try:
        opts = options({"transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}, per_call_timeout_s=10)
        trajectory, _ = rollout(opts, [[("search_inbox", {"keywords": "Raven"})], die_then_read, "never asked"])
    finally:
        server.kill()
        server.wait(timeout=30)
    assert trajectory.error.startswith("McpServerCrashed: ")
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "tool", "assistant"]
    assert hit in trajectory.messages[2]["content"]
    fault_table.append(("HTTP server dies mid-run", "trajectory error: McpServerCrashed", "messages kept"))
