"""Running the mcp environment against real MCP server processes, driven by the scripted policy."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.ports import free_port  # noqa: F401  (re-exported to the MCP tests)
from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.types import Scenario

FAULT_SERVER = str(Path(__file__).with_name("mcp_fault_server.py"))
MAILBOX = ["-m", "training.environments.mailbox_server"]
# The tests' mailbox model: the episode's shape, not the demo's copying (docs/mcp.md). Build 7 with 60 steps (and 20
# with the tools): a well-formed greedy search_inbox call on all 100 questions of the served mailbox, and 72 of 100
# sampled first turns (temperature 1) of the web-app run's two questions (150 + 50 steps: 100 and 90 of 100); 49 s
# to build on a quiet machine against 98 s.
QUICK_SFT_STEPS = 60


def quick_mailbox_model() -> Path:
    """The tiny mailbox model the tests share: built once (about a minute on CPU), cached under var/ and
    rebuilt when its recipe changes."""
    from tests.built_models import quick_mailbox_model as build

    return build(QUICK_SFT_STEPS)


def stdio(args: list[str], env: dict | None = None) -> dict:
    return {"transport": "stdio", "command": sys.executable, "args": args, "env": env or {}}


def options(server: dict, **more) -> object:
    return parse_options(get_environment("mcp"), {"server": server, **more})


def rollout(opts, replies: list, scenario: Scenario | None = None, env=None):
    env = env or get_environment("mcp")
    scenario = scenario or Scenario(id="s", user_message="Find it.")
    client = scripted_client(replies)
    trajectory = asyncio.run(env.rollout(client, MODEL, scenario, RolloutConfig("", SamplingConfig(), opts)))
    return trajectory, client.requests


def launch(opts):
    return asyncio.run(get_environment("mcp").launch(opts))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def start_http_mailbox(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, *MAILBOX, "--transport", "http", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the HTTP mailbox server exited") from None
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the HTTP mailbox server did not listen within 60 s")
