"""Environments rolled out against the real local inference server and the tiny model."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openai import AsyncOpenAI

from training.config import SamplingConfig, ServerConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.environments.tools import Tool, ToolsOptions, call_tool, resolve_tools
from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE
from training.servers import start_server
from training.types import Scenario, TrainingError


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    with start_server(ServerConfig(), str(tiny_model_dir), tmp_path_factory.mktemp("srv") / "server.log") as s:
        yield s


def rollout(server, kind, scenario, options=None, system_prompt="", max_tokens=12):
    env = get_environment(kind)
    config = RolloutConfig(system_prompt, SamplingConfig(max_tokens=max_tokens), parse_options(env, options or {}))

    async def go():
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused")
        return await env.rollout(client, server.model_name, scenario, config)

    return asyncio.run(go())


def test_a_2048_game_keeps_every_turn_its_token_ids_and_its_reward(server):
    scenario = Scenario(id="g", user_message=DEMO_USER_MESSAGE, metadata={"seed": 3})
    t = rollout(server, "game_2048", scenario, {"max_turns": 3}, DEMO_SYSTEM_PROMPT)
    assistant = [m for m in t.messages if m["role"] == "assistant"]
    assert 1 <= len(assistant) <= 3
    assert len(t.turn_token_ids) == len(assistant) and all(ids for ids in t.turn_token_ids)
    assert t.completion_tokens == sum(len(ids) for ids in t.turn_token_ids)
    assert 0.0 < t.env_reward <= 1.0
    assert t.metadata["ended"] in ("no well-formed move", "turn limit", "won", "no moves left") or \
        t.metadata["ended"].startswith("illegal move")
    assert t.messages[1]["content"].startswith(DEMO_USER_MESSAGE + "\n")


def test_a_chat_rollout_sends_follow_ups_and_scores_exact_match(server):
    scenario = Scenario(id="c", user_message="Say hi", reference="zzz-not-there", context="Greeting task.")
    t = rollout(server, "chat", scenario, {"follow_ups": ["And again?"], "exact_match": True})
    assert [m["role"] for m in t.messages] == ["user", "assistant", "user", "assistant"]
    assert "Context:\nGreeting task." in t.messages[0]["content"]
    assert t.env_reward == 0.0


def test_tools_are_declared_to_the_model_and_recorded_on_the_trajectory(server):
    scenario = Scenario(id="t", user_message="What is 2+2?")
    t = rollout(server, "tools", scenario, {"max_turns": 1})
    assert [tool["function"]["name"] for tool in t.tools] == ["calculator", "lookup"]


def test_a_tool_gets_its_arguments_and_the_scenario_and_errors_become_its_answer():
    scenario = Scenario(id="t", user_message="", metadata={"documents": {"policy": "30 days"}})
    lookup, calculator = resolve_tools(ToolsOptions())[1], resolve_tools(ToolsOptions())[0]
    assert call_tool(lookup, '{"key": "policy"}', scenario) == "30 days"
    assert call_tool(calculator, '{"expression": "6*7"}', scenario) == "42"
    assert call_tool(calculator, "not json", scenario).startswith("error: JSONDecodeError")
    assert call_tool(calculator, '{"expression": "open(1)"}', scenario).startswith("error: ValueError")


def test_custom_tools_are_imported_by_dotted_path_and_a_bad_path_is_named():
    options = ToolsOptions(tools=[], custom_tools=[{"name": "up", "function": "string:capwords"}])
    tool = resolve_tools(options)[0]
    assert isinstance(tool, Tool) and tool.function("ab cd") == "Ab Cd"
    with pytest.raises(TrainingError, match="cannot import 'nowhere:fn'"):
        resolve_tools(ToolsOptions(tools=[], custom_tools=[{"name": "x", "function": "nowhere:fn"}]))


def test_asking_for_a_model_the_server_does_not_serve_is_an_error(server):
    scenario = Scenario(id="g", user_message="hi")
    env = get_environment("chat")
    config = RolloutConfig("", SamplingConfig(max_tokens=4), parse_options(env, {}))

    async def go():
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        return await env.rollout(client, "run@7", scenario, config)

    with pytest.raises(Exception, match="does not exist"):
        asyncio.run(go())


def test_a_groups_identical_first_turns_reach_the_server_as_one_request_with_n_choices(server):
    from training.rl.groups import rollout_groups

    sent = []

    async def count(request):
        if request.url.path.endswith("/chat/completions"):
            sent.append(json.loads(request.content)["n"] if b'"n"' in request.content else 1)

    env = get_environment("game_2048")
    config = RolloutConfig(DEMO_SYSTEM_PROMPT, SamplingConfig(max_tokens=12), parse_options(env, {"max_turns": 1}))
    scenario = Scenario(id="g", user_message=DEMO_USER_MESSAGE, metadata={"seed": 3})

    async def go():
        async with httpx.AsyncClient(event_hooks={"request": [count]}) as http:
            client = AsyncOpenAI(base_url=server.base_url, api_key="unused", http_client=http)
            return await rollout_groups(env, client, server.model_name, scenario, config, 8)

    [group] = asyncio.run(go())
    assert sent == [8]  # one request for the eight identical first turns
    assert len(group.trajectories) == 8 and not group.errors
    for t in group.trajectories:  # each trajectory is shaped as if it had asked alone
        assert [m["role"] for m in t.messages][:3] == ["system", "user", "assistant"]
        assert [m["role"] for m in t.messages].count("assistant") == 1
        assert len(t.turn_token_ids) == 1 and t.turn_token_ids[0]
        assert t.completion_tokens == len(t.turn_token_ids[0])
        assert t.env_reward is not None


def test_an_mcp_rollout_on_the_real_server_declares_the_servers_tools_and_keeps_sampled_ids(server):
    # The mailbox's three tool schemas alone take ~1300 tokens of the tiny model's 1024-token context, so the
    # seam is checked with the small fault server's tools.
    import sys

    from tests.training.mcp_helpers import FAULT_SERVER

    spec = {"transport": "stdio", "command": sys.executable, "args": [FAULT_SERVER, "ok"]}
    t = rollout(server, "mcp", Scenario(id="m", user_message="Echo hi.", reference="hi"),
                {"server": spec, "max_turns": 2, "reward": "reference"})
    assert [tool["function"]["name"] for tool in t.tools] == ["echo", "nap", "fail", "hang", "crash", "garbage"]
    assistant = [m for m in t.messages if m["role"] == "assistant"]
    assert len(t.turn_token_ids) == len(assistant) >= 1 and all(t.turn_token_ids)
    assert t.error is None and 0.0 <= t.env_reward <= 1.0
