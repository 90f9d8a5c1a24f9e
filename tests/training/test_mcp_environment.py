"""The `mcp` environment against the example mailbox server, over stdio and streamable HTTP."""
from __future__ import annotations

import json

import pytest

from tests.training.mcp_helpers import FAULT_SERVER, MAILBOX, free_port, launch, options, rollout, start_http_mailbox, \
    stdio
from training.environments.mailbox_server.mailbox import generate
from training.environments.mcp import reference_reward
from training.types import Scenario, TrainingError


def mailbox_scenario(index: int = 0) -> Scenario:
    s = generate(0)[1][index]
    return Scenario(id=s.id, user_message=s.question, reference=s.answer, metadata={"source_ids": s.source_ids})


def solve(scenario: Scenario, answer: str | None = None, sources: list[str] | None = None) -> list:
    """The replies of an agent that searches, reads the source and answers."""
    project = next(w for w in scenario.user_message.rstrip("?").split() if w[0].isupper() and w not in ("What", "In"))
    (source,) = scenario.metadata["source_ids"]
    return [[("search_inbox", {"keywords": project})], [("read_email", {"id": source})],
            [("answer", {"text": answer or f"It is {scenario.reference}.", "sources": sources or [source]})]]


def test_an_agent_that_searches_reads_and_answers_over_stdio_earns_the_full_reward():
    scenario = mailbox_scenario(0)
    trajectory, requests = rollout(options(stdio(MAILBOX), reward="reference"), solve(scenario), scenario)
    assert trajectory.error is None and trajectory.env_reward == 1.0
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "tool"] * 1 + ["assistant", "tool"] * 2
    hits = json.loads(trajectory.messages[2]["content"])
    assert scenario.metadata["source_ids"][0] in [h["id"] for h in hits]
    assert scenario.reference.split()[0] in json.loads(trajectory.messages[4]["content"])["body"]
    assert trajectory.messages[-1]["content"] == "answer recorded"
    shown = [t["function"]["name"] for t in requests[0]["tools"]]
    assert shown == ["search_inbox", "read_email", "answer"] == [t["function"]["name"] for t in trajectory.tools]
    assert "from" in requests[0]["tools"][0]["function"]["parameters"]["properties"]
    assert len(trajectory.turn_token_ids) == 3 and all(trajectory.turn_token_ids)  # one per assistant turn


def test_the_same_mailbox_over_streamable_http_scores_a_wrong_answer_with_right_sources():
    port = free_port()
    server = start_http_mailbox(port)
    try:
        opts = options({"transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}, reward="reference")
        assert [t["function"]["name"] for t in launch(opts)] == ["search_inbox", "read_email", "answer"]
        scenario = mailbox_scenario(1)
        trajectory, _ = rollout(opts, solve(scenario, answer="no idea"), scenario)
        assert trajectory.error is None and trajectory.env_reward == 0.25
        assert json.loads(trajectory.messages[4]["content"])["id"] == scenario.metadata["source_ids"][0]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_reference_reward_needs_the_whole_reference_and_weighs_the_sources():
    scenario = Scenario(id="x", user_message="q", reference="room E49", metadata={"source_ids": ["m1"]})
    assert reference_reward("The review is in Room E49.", ["m1"], scenario) == 1.0
    assert reference_reward("room E4", ["m1"], scenario) == 0.25  # a prefix of the reference is not the answer
    assert reference_reward("room E49", ["m1", "m2"], scenario) == 0.75 + 0.25 / 2
    assert reference_reward("room E49", [], scenario) == 0.75
    assert reference_reward(None, ["m1"], scenario) == 0.0


def test_a_plain_reply_is_the_answer_when_the_agent_never_calls_the_answer_tool():
    scenario = mailbox_scenario(2)
    trajectory, _ = rollout(options(stdio(MAILBOX), reward="reference"), [f"It is {scenario.reference}"], scenario)
    assert trajectory.env_reward == 0.75 and trajectory.error is None


def test_bad_calls_a_tool_error_and_a_long_result_reach_the_agent_as_tool_messages():
    opts = options(stdio([FAULT_SERVER, "ok"]), max_result_chars=100, max_turns=2)
    replies = [[("echo", {"text": "x" * 500}), ("fail", {}), ("nope", {}), ("echo", "{not json")], "done"]
    trajectory, _ = rollout(opts, replies)
    results = [m["content"] for m in trajectory.messages if m["role"] == "tool"]
    assert results[0] == "x" * 100 + "… [400 more characters cut]"
    assert results[1].startswith("error: ") and "the disk is full" in results[1]
    assert results[2].startswith("error: no tool named 'nope'")
    assert results[3] == "error: the arguments must be a JSON object"
    assert trajectory.error is None and trajectory.messages[-1]["content"] == "done"


def test_the_turn_limit_ends_a_rollout_that_keeps_calling_tools():
    trajectory, _ = rollout(options(stdio([FAULT_SERVER, "ok"]), max_turns=2), [[("echo", {"text": "a"})]] * 5)
    assert sum(m["role"] == "assistant" for m in trajectory.messages) == 2
    assert trajectory.metadata["turn_limit_reached"] is True


@pytest.mark.parametrize("server, problem", [
    ({"transport": "stdio", "command": "x", "shell": True}, "shell"),
    ({"transport": "http", "url": "file:///etc/passwd"}, "url"),
    ({"transport": "carrier-pigeon", "url": "http://x"}, "server"),
])
def test_a_bad_server_spec_is_refused_with_the_key_named(server, problem):
    with pytest.raises(TrainingError, match=problem):
        options(server)


def test_session_starts_take_turns_and_each_gets_its_own_startup_timeout(tmp_path):
    """Ten rollouts start together against a server that takes about two seconds to start: two start at a time,
    and the last two, which wait at least 4 x 1 s for their turn, still get their whole 5 s to start."""
    import asyncio

    from tests.training.scripted_policy import MODEL, scripted_client
    from training.config import SamplingConfig
    from training.environments import RolloutConfig, get_environment

    starts = tmp_path / "starts"
    env = get_environment("mcp")
    server = stdio([FAULT_SERVER, "slow"], env={"FAULT_SERVER_STARTS": str(starts)})
    config = RolloutConfig("", SamplingConfig(), options(server, max_concurrent_starts=2, startup_timeout_s=5.0))

    async def together() -> list:
        return await asyncio.gather(*(env.rollout(scripted_client(["done"]), MODEL,
                                                  Scenario(id=f"s{i}", user_message="hi"), config) for i in range(10)))

    trajectories = asyncio.run(together())
    assert [t.error for t in trajectories] == [None] * 10
    times = sorted(float(line) for line in starts.read_text().split())
    assert len(times) == 10
    for first, third in zip(times, times[2:]):  # a third process starts only once one of two has listed its tools
        assert third >= first + 1.0


@pytest.mark.parametrize("limit, overlap", [(1, False), (2, True)])
def test_max_concurrent_calls_bounds_the_calls_in_flight_across_rollouts(limit, overlap):
    import asyncio

    from tests.training.scripted_policy import MODEL, scripted_client
    from training.config import SamplingConfig
    from training.environments import RolloutConfig, get_environment

    env = get_environment("mcp")
    config = RolloutConfig("", SamplingConfig(), options(stdio([FAULT_SERVER, "ok"]), max_concurrent_calls=limit))

    async def both() -> list:
        return await asyncio.gather(*(env.rollout(scripted_client([[("nap", {"seconds": 4})], "done"]), MODEL,
                                                  Scenario(id=f"s{i}", user_message="nap"), config) for i in (0, 1)))

    spans = sorted(tuple(map(float, t.messages[2]["content"].split())) for t in asyncio.run(both()))
    assert (spans[1][0] < spans[0][1]) is overlap
