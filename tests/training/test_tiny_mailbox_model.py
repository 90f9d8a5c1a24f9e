"""The tiny model's mailbox variant: built offline, a whole episode fits, and it runs the real mailbox server."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from tests.training.mcp_helpers import quick_mailbox_model
from training.config import SamplingConfig, ServerConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.environments.mailbox_server.mailbox import Mailbox, PROJECTS, generate, scenario_records
from training.environments.mcp import reference_reward
from training.fixtures.tiny_mailbox_model import (MAILBOX_SYSTEM_PROMPT, NAME_POOL, episode, mailbox_tools,
                                                  project_names, warmup_episodes)
from training.model.chat_format import encode_conversation
from training.servers import start_server
from training.types import Scenario


@pytest.fixture(scope="module")
def mailbox_model_dir() -> Path:
    return quick_mailbox_model()


def test_the_warm_up_never_shows_a_served_task_its_answer_or_its_email_but_knows_its_projects():
    emails, scenarios = generate(0)
    assert sum(s.split == "held_out" for s in scenarios) == 20
    episodes = warmup_episodes()
    text = json.dumps(episodes)
    answers = [json.loads(e[-1]["tool_calls"][0]["function"]["arguments"])["text"] for e in episodes]
    bodies = {e.id: e.body for e in emails}
    for s in scenarios:  # train and held-out alike: both are new to the warm-up
        assert bodies[s.source_ids[0]] not in text
        # (a served date may be some email's date: it is never an answer given)
        assert not [a for a in answers if reference_reward(a, [], Scenario(**scenario_records([s])[0])) > 0]
    # Other mailboxes ask about the same projects and more (NAME_POOL): the served names are known words, and
    # "project X" is copied from the question, not recalled.
    asked = {w for e in episodes for w in e[1]["content"].rstrip("?").split() if w in NAME_POOL}
    assert set(PROJECTS) < asked and len(asked) > 4 * len(PROJECTS)
    assert project_names(1) != project_names(2) and len(project_names(1)) == len(PROJECTS)


def test_a_warm_up_episode_copies_its_search_answer_and_sources_from_what_it_has_seen():
    emails, scenarios = generate(0)
    mailbox = Mailbox(emails)
    for s in scenarios[:8]:
        ep = episode(s, mailbox)
        keywords = json.loads(ep[2]["tool_calls"][0]["function"]["arguments"])["keywords"]
        project = [w for w in s.question.rstrip("?").split() if w in PROJECTS]
        assert keywords in s.question and len(project) == 1 and project[0] in keywords.split()
        (hit,) = json.loads(ep[3]["content"])  # the span of the question finds the fact email alone
        email = json.loads(ep[5]["content"])
        assert hit["id"] == s.source_ids[0] == email["id"]
        answer = json.loads(ep[6]["tool_calls"][0]["function"]["arguments"])
        assert answer["sources"] == s.source_ids and answer["text"] in email["body"]
        assert reference_reward(answer["text"], answer["sources"], Scenario(**scenario_records([s])[0])) == 1.0


def test_the_variant_builds_and_a_whole_episode_fits_its_context(mailbox_model_dir):
    from transformers import AutoConfig, AutoTokenizer

    from training.fixtures.tiny_model import build_tokenizer as tiny_tokenizer

    config = AutoConfig.from_pretrained(mailbox_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(mailbox_model_dir)
    assert (config.num_hidden_layers, config.hidden_size, config.max_position_embeddings) == (4, 128, 4096)
    tools = mailbox_tools()
    assert [t["function"]["name"] for t in tools] == ["search_inbox", "read_email", "answer"]
    emails, scenarios = generate(0)
    longest = max(len(encode_conversation(tokenizer, episode(s, Mailbox(emails)), tools)[0]) for s in scenarios)
    assert longest < config.max_position_embeddings // 2  # room for a few wrong turns too
    # A project's name is pieces other words share, not a token of its own: copying a name is one skill for all.
    assert all(len(tokenizer.tokenize(f" {name}")) > 1 for name in NAME_POOL)
    # The 2048 model's tokenizer needs more than its whole 1024-token context for the tools alone.
    assert len(tiny_tokenizer(["plain text"])(json.dumps(tools))["input_ids"]) > 1024


def test_one_mailbox_rollout_on_the_variant_calls_the_real_server_over_stdio(mailbox_model_dir, tmp_path):
    record = next(r for r in scenario_records(generate(0)[1]) if r["metadata"]["split"] == "held_out")
    scenario = Scenario(**record)
    env = get_environment("mcp")
    options = parse_options(env, {"server": {"transport": "stdio", "command": sys.executable,
                                             "args": ["-m", "training.environments.mailbox_server"]},
                                  "max_turns": 3, "reward": "reference"})
    config = RolloutConfig(MAILBOX_SYSTEM_PROMPT, SamplingConfig(temperature=0.0, max_tokens=48), options)
    with start_server(ServerConfig(), str(mailbox_model_dir), tmp_path / "server.log") as server:
        async def go():
            client = AsyncOpenAI(base_url=server.base_url, api_key="unused")
            return await env.rollout(client, server.model_name, scenario, config)

        trajectory = asyncio.run(go())
    assert trajectory.error is None
    calls = [c["function"]["name"] for m in trajectory.messages if m["role"] == "assistant"
             for c in m.get("tool_calls") or []]
    assert calls and calls[0] == "search_inbox"
    results = [m for m in trajectory.messages if m["role"] == "tool"]
    assert results and results[0]["content"].startswith("[")  # the server's search results (JSON list)
    assert 0.0 <= trajectory.env_reward <= 1.0
