"""External rollouts, engine side: an agent outside the loop samples through the run's HTTP endpoint, its groups
come in through the inbox, and the loop scores and trains them on exactly the sampled tokens."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from tests.training.configs import small_config
from training import train
from training.events import RolloutsClosed, RolloutsWanted, StepFinished, TrainStep
from training.rl.external import Inbox, StaleModel, UnsampledTurn, assemble_trajectory, sse_chunks
from training.types import TrainingError

EXTERNAL = {"kind": "external", "options": {"group_timeout_s": 60}}


def recorded_call(model: str, messages: list[dict], reply: dict, token_ids: list[int], logprobs: list[float]):
    return {"model": model, "request": {"messages": messages, "tools": None},
            "choices": [{"message": reply, "token_ids": token_ids, "logprobs": logprobs, "finish_reason": "stop"}],
            "completion_tokens": len(token_ids)}


OPENING = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Board: 2 . . 2"}]


def test_a_trajectory_built_from_its_recorded_calls_keeps_the_sampled_tokens_of_every_turn():
    first = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "move", "arguments": '{"dir": "left"}'}}]}
    second = {"role": "assistant", "content": "done"}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "4 . . ."}
    calls = [recorded_call("r@1", OPENING, first, [5, 6], [-0.1, -0.2]),
             recorded_call("r@1", [*OPENING, first, tool], second, [7], [-0.3])]
    # The client's framework re-serialised the arguments and left out the empty content: still the same answer.
    resent = {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "move", "arguments": '{ "dir":"left" }'}}]}
    data = assemble_trajectory(scenario_id="s1", calls=calls, messages=[*OPENING, resent, tool, second],
                               reward=0.5, metadata={"k": 1}, model="r@1", allow_unsampled=False)
    assert data["turn_token_ids"] == [[5, 6], [7]]
    assert data["turn_logprobs"] == [[-0.1, -0.2], [-0.3]]
    assert data["env_reward"] == 0.5 and data["completion_tokens"] == 3 and data["metadata"] == {"k": 1}
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant", "tool", "assistant"]

    # Without messages the trajectory is the last call's conversation and answer.
    assert assemble_trajectory(scenario_id="s1", calls=calls, messages=None, reward=None, metadata={},
                               model=None, allow_unsampled=False)["messages"][-1]["content"] == "done"


def test_a_turn_the_model_never_sampled_is_refused_unless_the_run_allows_it():
    calls = [recorded_call("r@1", OPENING, {"role": "assistant", "content": "left"}, [5], [-0.1])]
    forged = [*OPENING, {"role": "assistant", "content": "the perfect answer"}]
    with pytest.raises(UnsampledTurn, match="message 2"):
        assemble_trajectory(scenario_id="s1", calls=calls, messages=forged, reward=1.0, metadata={}, model=None,
                            allow_unsampled=False)
    data = assemble_trajectory(scenario_id="s1", calls=calls, messages=forged, reward=1.0, metadata={},
                               model=None, allow_unsampled=True)
    assert data["turn_token_ids"] == [None]  # trained on a re-tokenisation, as the run allows

    # A recorded answer used twice is one sampled turn, not two.
    twice = [*OPENING, {"role": "assistant", "content": "left"}, {"role": "user", "content": "again"},
             {"role": "assistant", "content": "left"}]
    with pytest.raises(UnsampledTurn, match="message 4"):
        assemble_trajectory(scenario_id="s1", calls=calls, messages=twice, reward=1.0, metadata={}, model=None,
                            allow_unsampled=False)


def test_a_turn_sampled_with_another_steps_adapter_is_refused():
    calls = [recorded_call("r@1", OPENING, {"role": "assistant", "content": "left"}, [5], [-0.1])]
    with pytest.raises(StaleModel, match="r@2"):
        assemble_trajectory(scenario_id="s1", calls=calls, messages=None, reward=1.0, metadata={}, model="r@2",
                            allow_unsampled=False)


async def _streamed(body: bytes) -> tuple[str, str | None, dict | None]:
    """What the openai client reads from `body` served as a stream (the client is outside the engine: real)."""
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, content=body, headers={"content-type": "text/event-stream"}))
    client = openai.AsyncOpenAI(base_url="http://endpoint/v1", api_key="k",
                                http_client=httpx.AsyncClient(transport=transport))
    text, finish, usage = "", None, None
    async for chunk in await client.chat.completions.create(model="m", messages=[], stream=True,
                                                           stream_options={"include_usage": True}):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
        usage = chunk.usage.model_dump() if chunk.usage else usage
    return text, finish, usage


def test_a_completion_written_as_a_stream_reads_back_the_same_through_the_openai_client():
    completion = {"id": "c", "created": 1, "model": "r@1", "object": "chat.completion",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "up then left"},
                               "finish_reason": "length"}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}
    text, finish, usage = asyncio.run(_streamed(sse_chunks(completion, include_usage=True)))
    assert (text, finish, usage["total_tokens"]) == ("up then left", "length", 7)


class Agent:
    """The user's process, played in the test: it reads each `rollouts_wanted`, samples every trajectory through
    the announced HTTP endpoint with the plain openai client, and hands the groups in."""

    def __init__(self, inbox: Inbox, *, leave_out: set[tuple[int, int]] = frozenset(),
                 hand_in_after_s: float = 0.0) -> None:
        self.inbox, self.leave_out, self.hand_in_after_s = inbox, leave_out, hand_in_after_s
        self.wanted: asyncio.Queue = asyncio.Queue()
        self.sampled: dict[tuple[int, int], list[list[int]]] = {}
        self.events: list = []

    def sink(self, event) -> None:
        self.events.append(event)
        if isinstance(event, RolloutsWanted):
            self.wanted.put_nowait(event)

    async def one(self, client, wanted: RolloutsWanted, group: dict, k: int) -> dict:
        messages = [{"role": "system", "content": wanted.system_prompt},
                    {"role": "user", "content": group["scenario"]["user_message"]}]
        response = await client.chat.completions.create(
            model=wanted.model, messages=messages, max_tokens=wanted.sampling["max_tokens"],
            temperature=wanted.sampling["temperature"], logprobs=True, extra_body={"return_token_ids": True})
        choice = response.choices[0]
        call = {"model": response.model, "request": {"messages": messages, "tools": None}, "choices": [
            {"message": {"role": "assistant", "content": choice.message.content},
             "token_ids": choice.model_extra["token_ids"], "logprobs": [c.logprob for c in choice.logprobs.content],
             "finish_reason": choice.finish_reason}], "completion_tokens": response.usage.completion_tokens}
        self.sampled.setdefault((wanted.step, group["group_index"]), []).append(choice.model_extra["token_ids"])
        # Distinct within a group, so no trajectory's advantage is 0 (those train nothing and would be left out).
        reward = (k + 1) / wanted.group_size
        return assemble_trajectory(scenario_id=group["scenario"]["id"], calls=[call], messages=None, reward=reward,
                                   metadata={"agent": "test"}, model=wanted.model, allow_unsampled=False)

    async def run(self) -> None:
        while True:
            wanted = await self.wanted.get()
            asked = time.monotonic()
            client = openai.AsyncOpenAI(base_url=wanted.base_url, api_key="unused", max_retries=0)
            assert "reference" not in json.dumps(wanted.groups)  # the judge's, never the agent's
            for group in wanted.groups:
                if (wanted.step, group["group_index"]) in self.leave_out:
                    continue
                trajectories = [await self.one(client, wanted, group, k) for k in range(wanted.group_size)]
                await asyncio.sleep(max(0.0, asked + self.hand_in_after_s - time.monotonic()))
                self.inbox.put(wanted.step, group["group_index"], trajectories)


async def _train_with(agent: Agent, config, **kwargs):
    runner = asyncio.ensure_future(agent.run())
    try:
        return await train(config, sink=agent.sink, inbox=agent.inbox, **kwargs)
    finally:
        runner.cancel()


def test_an_external_agents_groups_are_scored_and_trained_on_the_tokens_it_sampled(tiny_model_dir, tmp_path):
    agent = Agent(Inbox())
    summary = asyncio.run(_train_with(agent, small_config(tiny_model_dir, tmp_path, environment=EXTERNAL)))
    assert summary.status == "completed" and summary.steps_done == 2
    wanted = [e for e in agent.events if isinstance(e, RolloutsWanted)]
    assert [w.step for w in wanted] == [1, 2] and [w.model for w in wanted] == ["base", "t@1"]
    assert wanted[0].base_url.startswith("http://127.0.0.1:")  # the in-process engine's HTTP front
    closed = [e for e in agent.events if isinstance(e, RolloutsClosed)]
    assert [(c.received, c.missing) for c in closed] == [([0, 1], []), ([0, 1], [])]
    scored = [e for e in agent.events if type(e).__name__ == "GroupScored"]
    assert {(e.step, e.group_index): [t["turn_token_ids"][0] for t in e.trajectories] for e in scored} \
        == agent.sampled
    trained = [e.metrics for e in agent.events if isinstance(e, TrainStep)]
    assert all(m["trained_sequences"] > 0 for m in trained)
    # The trainer's log-probs of the sampled ids are the sampler's (same weights, same tokens): no re-tokenisation.
    assert all(m["sampler_gap"] is not None and abs(m["sampler_gap"]) < 1e-3 for m in trained), trained


def test_a_group_that_does_not_come_is_recorded_as_failed_rollouts_and_the_step_trains_on_the_rest(
        tiny_model_dir, tmp_path):
    agent = Agent(Inbox(), leave_out={(1, 1)})
    config = small_config(tiny_model_dir, tmp_path, steps=1,
                          environment={"kind": "external", "options": {"group_timeout_s": 6.0}})
    summary = asyncio.run(_train_with(agent, config))
    assert summary.status == "completed"
    closed = next(e for e in agent.events if isinstance(e, RolloutsClosed))
    assert (closed.received, closed.missing) == ([0], [1])
    metrics = next(e.metrics for e in agent.events if isinstance(e, StepFinished))
    assert metrics["rollout_errors"] == 4 and metrics["trained_sequences"] == 4


def test_time_paused_does_not_count_against_the_groups_deadline(tiny_model_dir, tmp_path):
    from training.events import StaticControl

    control = StaticControl()
    agent = Agent(Inbox(), hand_in_after_s=3.5)  # after the 2 s deadline, but 3.3 s of that paused
    original = agent.sink

    def sink(event) -> None:
        original(event)
        if isinstance(event, RolloutsWanted):
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, control.set, "pause")
            loop.call_later(4.2, control.set, "run")

    agent.sink = sink
    config = small_config(tiny_model_dir, tmp_path, steps=1,
                          environment={"kind": "external", "options": {"group_timeout_s": 2.0}})
    summary = asyncio.run(_train_with(agent, config, control=control))
    assert summary.status == "completed"
    closed = next(e for e in agent.events if isinstance(e, RolloutsClosed))
    assert (closed.received, closed.missing) == ([0, 1], [])


def test_with_on_missing_fail_a_group_that_does_not_come_fails_the_run_naming_it(tiny_model_dir, tmp_path):
    agent = Agent(Inbox(), leave_out={(1, 0)})
    config = small_config(tiny_model_dir, tmp_path, steps=1, environment={
        "kind": "external", "options": {"group_timeout_s": 6.0, "on_missing": "fail"}})
    with pytest.raises(TrainingError, match=r"step 1: no group came for group\(s\) 0 within 6 s"):
        asyncio.run(_train_with(agent, config))


def test_a_cancel_while_waiting_for_groups_ends_the_run_without_training_the_step(tiny_model_dir, tmp_path):
    from training.events import StaticControl

    control = StaticControl()
    agent = Agent(Inbox(), leave_out={(1, 0), (1, 1)})
    original = agent.sink

    def sink(event) -> None:
        original(event)
        if isinstance(event, RolloutsWanted):
            asyncio.get_running_loop().call_later(0.5, control.set, "cancel")

    agent.sink = sink
    config = small_config(tiny_model_dir, tmp_path, steps=2, environment=EXTERNAL)
    summary = asyncio.run(_train_with(agent, config, control=control))
    assert summary.status == "cancelled" and summary.steps_done == 0
    assert not [e for e in agent.events if isinstance(e, TrainStep)]


def test_an_external_agent_without_an_inbox_is_refused_with_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(TrainingError, match="submitted through Rubric Studio's web app"):
        asyncio.run(train(small_config(tiny_model_dir, tmp_path, environment=EXTERNAL)))


def test_a_server_listening_everywhere_is_announced_by_the_machines_name():
    import socket
    from types import SimpleNamespace

    from training.rl.external import serve_http

    url, stop = serve_http(SimpleNamespace(base_url="http://0.0.0.0:8123/v1"), "0.0.0.0")
    assert url == f"http://{socket.gethostname()}:8123/v1"
    assert serve_http(SimpleNamespace(base_url="http://10.0.0.5:8123/v1"), "10.0.0.5")[0] == "http://10.0.0.5:8123/v1"
