"""The external-rollouts client against an HTTP double of the Studio API (studio_double.py): calls tagged per
trajectory (concurrent trajectories never mix), through openai, a plain httpx client and the OpenAI Agents SDK;
next_step waiting and ending; error answers mapped to exceptions; train() over a whole run."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from rubric_studio_client import (
    Forbidden, Invalid, NotFound, Refused, RolloutFailed, StepClosed, StudioClient, Submitted, TooLarge,
    Unauthorized, Unsampled, current_trajectory,
)
from tests.rubric_studio_client.studio_double import RUN_ID, StudioDouble
from tests.webapp.conftest import ROOT


@pytest.fixture
def studio():
    with StudioDouble(steps=2, groups=2, group_size=3, completion_delay_s=0.05) as double:
        yield double


def test_the_client_imports_neither_django_nor_torch():
    code = ("import sys, rubric_studio_client\n"
            "print([m for m in ('django', 'torch', 'transformers', 'training', 'webapp') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_concurrent_trajectories_tag_their_own_calls_and_untagged_calls_carry_none(studio):
    async with StudioClient(studio.url, studio.token, client_id="laptop-1") as client:
        run = await client.run(RUN_ID)

        async def agent(k: int) -> str:
            async with run.trajectory() as t:
                assert current_trajectory() is t
                for turn in range(2):  # two turns, interleaved with the other trajectories' by the delay
                    await run.openai.chat.completions.create(
                        model="run@0", messages=[{"role": "user", "content": f"{t.id} turn {turn}"}])
                    await asyncio.sleep(0)
                return t.id

        ids = await asyncio.gather(*(agent(k) for k in range(8)))
        await run.openai.chat.completions.create(model="run@0", messages=[{"role": "user", "content": "untagged"}])
    assert current_trajectory() is None
    calls = studio.completions
    assert len(calls) == 17 and len(set(ids)) == 8
    for call in calls:
        assert call.headers["x-client-id"] == "laptop-1"
        assert call.headers["authorization"] == f"Bearer {studio.token}"
    tagged = [c for c in calls if "x-trajectory-id" in c.headers]
    assert len(tagged) == 16
    for call in tagged:  # each call carries the id of the trajectory that made it, never a neighbour's
        assert call.body["messages"][0]["content"].startswith(call.headers["x-trajectory-id"] + " ")
    assert sorted({c.headers["x-trajectory-id"] for c in tagged}) == sorted(ids)
    assert "x-trajectory-id" not in calls[-1].headers


async def test_a_plain_httpx_client_and_tasks_started_inside_a_trajectory_are_tagged(studio):
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        http = run.httpx_client()  # what LangChain's ChatOpenAI takes as http_async_client
        url = f"{run.openai_base_url}/chat/completions"
        body = {"model": "run@0", "messages": [{"role": "user", "content": "hi"}]}
        async with run.trajectory(id="my-own.id_1") as t:
            inner = asyncio.create_task(http.post(url, json=body, headers={"Authorization": f"Bearer {run.token}"}))
            assert (await inner).status_code == 200
            assert run.headers()["X-Trajectory-Id"] == "my-own.id_1"
        assert "X-Trajectory-Id" not in run.headers()
    assert studio.completions[0].headers["x-trajectory-id"] == t.id == "my-own.id_1"
    assert studio.completions[0].headers["x-client-id"] == client.client_id


async def test_an_openai_agents_sdk_agent_on_the_handles_client_is_tagged(studio):
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        agent = Agent(name="echo", instructions="Be brief.", model_settings=ModelSettings(max_tokens=8),
                      model=OpenAIChatCompletionsModel(model="run@0", openai_client=run.openai))
        async with run.trajectory() as t:
            result = await Runner.run(agent, "task 1.0")
    assert result.final_output == "echo: task 1.0"
    assert [c.headers.get("x-trajectory-id") for c in studio.completions] == [t.id]


async def test_next_step_waits_while_the_run_is_queued_or_paused_and_gives_the_open_groups(studio):
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        studio.statuses = ["queued", "running", "paused", "awaiting_review"]  # "running": no step open yet
        polls = len(studio.state_polls)
        step = await run.next_step(poll_s=0.01)
        assert len(studio.state_polls) - polls == 5  # four answers without a step to roll out, then the step
        assert (step.step, step.model, step.group_size) == (1, "run@0", 3)
        assert [g.group_index for g in step.groups] == [0, 1]
        assert step.groups[1].scenario == {"id": "s1-1", "user_message": "task 1.1", "context": None,
                                           "metadata": {"k": 1}}
        assert step.messages(step.groups[0].scenario) == [{"role": "system", "content": "Be brief."},
                                                         {"role": "user", "content": "task 1.0"}]
        assert step.completion_args() == {"model": "run@0", "temperature": 1.0, "top_p": 1.0, "max_tokens": 8}

        await run.submit_group(step, 0, ["a", "b"])
        again = await run.next_step(poll_s=0.01)  # the same step, without the group already submitted
        assert (again.step, [g.group_index for g in again.groups]) == (1, [1])
        await run.submit_group(again, 1, ["c"])
        second = await run.next_step(poll_s=0.01)  # waited while the engine "trained" (no step), then step 2
        assert second.step == 2 and second.model == "run@1"
        await run.submit_group(2, 0, ["d"])
        await run.submit_group(2, 1, ["e"])
        assert await run.next_step(poll_s=0.01) is None  # completed
        assert (await run.state()).ended


@pytest.mark.parametrize("status", ["failed", "cancelled", "crashed"])
async def test_next_step_ends_when_the_run_does(studio, status):
    studio.status = status
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        assert await run.next_step(poll_s=0.01) is None


async def test_next_step_gives_up_after_its_timeout(studio):
    studio.statuses = ["paused"] * 1000
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        with pytest.raises(TimeoutError, match="status paused"):
            await run.next_step(poll_s=0.01, timeout_s=0.1)


async def test_a_rate_limited_poll_is_retried_after_the_servers_hint(studio):
    studio.state_errors = [(429, {"Retry-After": "0.2"})]
    async with StudioClient(studio.url, studio.token) as client:
        assert (await client.run(RUN_ID)).run_id == RUN_ID  # the first GET answered 429, the second the state
    assert len(studio.state_polls) == 2


@pytest.mark.parametrize(("status", "body", "error"), [
    (400, {"detail": "Invalid input: see the fields named.", "trajectories": ["Ensure this field has at most 3 "
                                                                             "elements."]}, Invalid),
    (413, {"detail": "The body is over the 2 MB limit."}, TooLarge),
    (422, {"detail": "trajectory 'a': message 2 (assistant) is not an answer the model sampled"}, Unsampled),
    (409, {"detail": "step 1 is closed"}, StepClosed),
])
async def test_refused_submissions_raise_the_error_of_their_status_with_the_detail(studio, status, body, error):
    studio.errors.append((status, body))
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        with pytest.raises(error) as caught:
            await run.submit_group(1, 0, [Submitted("a", reward=0.5, metadata={"x": 1})])
    assert caught.value.status == status and caught.value.detail == body["detail"]
    assert isinstance(caught.value, Refused) == (status in (400, 413, 422))
    if status == 400:
        assert caught.value.fields == {"trajectories": body["trajectories"]}
        assert "trajectories: Ensure this field" in str(caught.value)
    assert studio.requests[-1].body == {"step": 1, "group_index": 0, "trajectories": [
        {"id": "a", "reward": 0.5, "metadata": {"x": 1}}]}


async def test_a_bad_token_another_projects_run_and_an_unknown_server_path_raise_at_once(studio):
    """At once: after the one request that was refused, with no retry (a retried 401 would still raise, late)."""
    cases = [(studio.url, "rs_wrong", RUN_ID, Unauthorized, "Invalid token"),
             (studio.url, studio.token, RUN_ID + 1, Forbidden, "another project"),
             (studio.url + "/nowhere", studio.token, RUN_ID, NotFound, "Not found")]
    for base_url, token, run_id, error, message in cases:
        sent = len(studio.requests)
        async with StudioClient(base_url, token) as client:
            with pytest.raises(error, match=message):
                await client.run(run_id)
        assert [r.method for r in studio.requests[sent:]] == ["GET"], (error, studio.requests[sent:])


async def test_submissions_are_checked_before_they_leave(studio):
    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        with pytest.raises(ValueError, match="at least one"):
            await run.submit_group(1, 0, [])
        with pytest.raises(ValueError, match="trajectory id 'a b'"):
            await run.submit_group(1, 0, ["a b"])
        with pytest.raises(ValueError, match="not a finite number"):
            await run.submit_group(1, 0, [("a", float("nan"))])
        with pytest.raises(TypeError, match="not int"):
            await run.submit_group(1, 0, [3])
    assert not [r for r in studio.requests if r.method == "POST"]


async def test_train_rolls_out_every_step_and_submits_each_group_with_its_rewards(studio):
    seen: list[tuple[int, str]] = []

    async def rollout(run, step, scenario):
        reply = await run.openai.chat.completions.create(messages=step.messages(scenario), **step.completion_args())
        seen.append((step.step, scenario["id"]))
        current_trajectory().metadata["answer"] = reply.choices[0].message.content
        return len(seen) / 10

    async with StudioClient(studio.url, studio.token) as client:
        run = await client.run(RUN_ID)
        assert await run.train(rollout, concurrency=4, poll_s=0.01) == 2
    assert sorted(seen) == sorted((s, f"s{s}-{g}") for s in (1, 2) for g in (0, 1) for _ in range(3))
    assert [(b["step"], b["group_index"]) for b in sorted(studio.submissions, key=lambda b: (b["step"],
                                                                                            b["group_index"]))] \
        == [(1, 0), (1, 1), (2, 0), (2, 1)]
    tagged = {c.headers["x-trajectory-id"]: c for c in studio.completions}
    for body in studio.submissions:
        assert len(body["trajectories"]) == 3
        for item in body["trajectories"]:
            call = tagged[item["id"]]  # every submitted id made the call of its own scenario
            assert call.body["messages"][-1]["content"] == f"task {body['step']}.{body['group_index']}"
            assert call.body["model"] == f"run@{body['step'] - 1}" and call.body["max_tokens"] == 8
            assert item["metadata"] == {"answer": f"echo: task {body['step']}.{body['group_index']}"}
            assert 0 < item["reward"] <= 1.2
    assert len(tagged) == 12


async def test_train_submits_a_group_without_its_failed_rollouts_and_raises_when_a_whole_group_fails():
    with StudioDouble(steps=1, groups=2, group_size=2) as studio:
        calls = {"n": 0}

        async def rollout(run, step, scenario):
            calls["n"] += 1
            if scenario["id"] == "s1-1" or calls["n"] == 1:
                raise RuntimeError(f"tool broke on {scenario['id']}")
            return None

        async with StudioClient(studio.url, studio.token) as client:
            run = await client.run(RUN_ID)
            with pytest.raises(RolloutFailed, match="group 1: all 2 rollouts raised") as caught:
                await run.train(rollout, poll_s=0.01)
        assert isinstance(caught.value.__cause__, RuntimeError)
        assert [(b["group_index"], len(b["trajectories"])) for b in studio.submissions] == [(0, 1)]
        assert "reward" not in studio.submissions[0]["trajectories"][0]  # None: the judge scores it


async def test_train_logs_a_group_the_run_refused_as_closed_and_rolls_it_out_again_while_it_stays_open(caplog):
    with StudioDouble(steps=1, groups=2, group_size=1) as studio:
        studio.errors.append((409, {"detail": "sampled with run@0, the step samples with run@1"}))

        async def rollout(run, step, scenario):
            await run.openai.chat.completions.create(messages=step.messages(scenario), **step.completion_args())
            return 1.0

        async with StudioClient(studio.url, studio.token) as client:
            run = await client.run(RUN_ID)
            assert await run.train(rollout, poll_s=0.01) == 1
    assert "was not taken: sampled with run@0" in caplog.text
    assert len(studio.completions) == 3  # the refused group's rollout ran again
    assert sorted(b["group_index"] for b in studio.submissions) == [0, 1]


def test_the_http_double_answers_like_the_contract():
    with StudioDouble() as studio:
        state = httpx.get(f"{studio.url}/api/runs/{RUN_ID}/rollouts/",
                          headers={"Authorization": f"Bearer {studio.token}"}).json()
    assert set(state) == {"run", "name", "status", "step", "model", "deadline_s", "timeout_s", "on_missing",
                          "allow_unsampled", "group_size", "system_prompt", "sampling", "total_steps",
                          "openai_base_url", "groups"}
    assert json.loads(json.dumps(state))["groups"][0]["submitted"] is False


@pytest.mark.parametrize("example", ["openai_agent.py", "agents_sdk_agent.py"])
def test_each_example_rolls_out_a_whole_run_in_its_own_process_running_its_tool_locally(example):
    with StudioDouble(steps=2, groups=2, group_size=2, tool_calls=True) as studio:
        out = subprocess.run([sys.executable, str(ROOT / "examples" / example), "--url", studio.url, "--token",
                              studio.token, "--run", str(RUN_ID), "--client-id", "example"],
                             cwd="/", capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "run 7 is completed; this process rolled out 2 step(s)" in out.stdout
        assert "step 2 group 1: submitted 2 trajectories" in out.stderr
        assert len(studio.submissions) == 4
        ids = {t["id"] for b in studio.submissions for t in b["trajectories"]}
        assert len(ids) == 8 and {c.headers["x-trajectory-id"] for c in studio.completions} == ids
        assert len(studio.completions) == 16  # per trajectory: the tool call, then the answer after its result
        results = [m for c in studio.completions for m in c.body["messages"] if m["role"] == "tool"]
        assert len(results) == 8 and all(m["content"] == "42" and m["tool_call_id"] == "call_1" for m in results)
        assert {c.headers["x-client-id"] for c in studio.requests} == {"example"}
        assert all(c.body["tools"][0]["function"]["name"] == "calculate" for c in studio.completions)


def test_the_examples_calculator_does_arithmetic_and_nothing_else():
    from examples.openai_agent import calculate

    assert calculate("(2 + 3) * 4") == "20"
    assert calculate("2 ** 10 / 4") == "256.0"
    assert calculate("__import__('os')").startswith("error:")
    assert calculate("1/0").startswith("error:")
