"""training.model.prompt_budget and the launch check it feeds (training.model.preflight): a run whose opening prompt (system
prompt, tools as the chat template renders them, the longest scenario) plus max_tokens is more than the model's
context is refused in words, with the numbers, before any worker starts; counted as the inference server counts."""
from __future__ import annotations

import pytest

from training.config import parse_run_config
from training.model.preflight import preflight
from training.model.prompt_budget import environment_tools, model_context, prompt_budget
from training.types import Scenario

SYSTEM = "You are a careful assistant. Answer in one line."


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)


def _config(model, *, max_tokens=256, kind="chat", options=None, scenarios=None, system=SYSTEM):
    return parse_run_config({
        "base_model": str(model), "system_prompt": system, "sampling": {"max_tokens": max_tokens},
        "environment": {"kind": kind, "options": options or {}},
        "scenarios": scenarios or [{"id": "short", "user_message": "Hi?"}]})


def test_the_tiny_model_holds_1024_tokens(tiny_model_dir):
    from transformers import AutoConfig

    assert model_context(AutoConfig.from_pretrained(str(tiny_model_dir), local_files_only=True)) == 1024


def test_the_count_is_the_inference_servers_own(tokenizer, tiny_model_dir):
    # The local server (training/servers/engine.py) refuses a request whose prompt plus max_tokens passes the
    # context, counting the rendered template this way: a budget that fits is a request the server takes.
    tools = environment_tools("tools", {})
    scenario = Scenario(id="s", user_message="What is 6 times 7?", context="Show the sum.")
    budget = prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=tools, scenarios=[scenario],
                           max_tokens=100)
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": "What is 6 times 7?\n\nContext:\nShow the sum."}],
        tools=tools, tokenize=False, add_generation_prompt=True)
    assert budget.prompt == len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    assert budget.frame < budget.prompt and budget.tools == 2 and budget.scenario == "s"
    assert budget.problem() is None and budget.needed == budget.prompt + 100


def test_the_longest_scenario_is_the_one_that_counts(tokenizer):
    scenarios = [Scenario(id=f"s{i}", user_message="word " * n) for i, n in enumerate([3, 400, 20, 90])]
    budget = prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=None, scenarios=scenarios,
                           max_tokens=64)
    assert budget.scenario == "s1"
    alone = prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=None, scenarios=[scenarios[1]],
                          max_tokens=64)
    assert budget.prompt == alone.prompt


def test_tools_count_as_the_template_renders_them(tokenizer):
    bare = prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=None, scenarios=[], max_tokens=1)
    many = [{"type": "function", "function": {"name": f"search_{i}", "description": "Search the mailbox " * 5,
                                              "parameters": {"type": "object", "properties": {
                                                  "query": {"type": "string", "description": "what to find"}}}}}
            for i in range(8)]
    tooled = prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=many, scenarios=[], max_tokens=1)
    assert tooled.frame > bare.frame + 8 * 20


def test_a_prompt_with_its_tools_and_answer_past_the_context_is_refused_with_its_numbers(tiny_model_dir, tokenizer):
    many = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Reads a mail folder " * 8,
                                              "parameters": {"type": "object", "properties": {}}}}
            for i in range(4)]  # ~900 tokens with the tiny model's template: room for the prompt, not the answer
    problems = preflight(_config(tiny_model_dir, kind="mcp", options={"server": {"transport": "http",
                                                                                 "url": "http://127.0.0.1:9/mcp"}}),
                         tools=many)
    assert len(problems) == 1
    budget = prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=many,
                           scenarios=[Scenario(id="short", user_message="Hi?")], max_tokens=256)
    assert budget.prompt < 1024 < budget.prompt + 256
    assert problems[0] == budget.problem()
    assert (f"it is {budget.prompt} tokens (the system prompt, its 4 tools and the longest scenario, short), "
            f"plus max tokens 256 = {budget.prompt + 256}, more than the model's context of 1024 tokens") in problems[0]


def test_a_long_scenario_is_refused_and_named_and_lower_max_tokens_is_offered(tiny_model_dir):
    scenarios = [{"id": "short", "user_message": "Hi?"}, {"id": "the-long-one", "user_message": "word " * 200}]
    problems = preflight(_config(tiny_model_dir, scenarios=scenarios, max_tokens=400))
    assert len(problems) == 1 and "the longest scenario, the-long-one" in problems[0]
    assert "or lower the agent's max tokens to at most" in problems[0]
    assert preflight(_config(tiny_model_dir, scenarios=scenarios[:1], max_tokens=400)) == []


def test_the_tools_environment_counts_its_declared_tools_without_importing_them(tiny_model_dir):
    custom = [{"name": f"t{i}", "function": "no_such_module:fn", "description": "Looks things up. " * 30}
              for i in range(6)]
    assert environment_tools("tools", {"custom_tools": custom})[-1]["function"]["name"] == "t5"
    problems = preflight(_config(tiny_model_dir, kind="tools", options={"custom_tools": custom}))
    assert len(problems) == 1 and "its 8 tools" in problems[0]
    assert environment_tools("chat", {}) is None


def test_a_prompt_that_alone_passes_the_context_says_no_max_tokens_can_help(tokenizer):
    budget = prompt_budget(tokenizer, context=1024, system_prompt="rule " * 1200, tools=None, scenarios=[],
                           max_tokens=16)
    assert budget.problem() == (f"the prompt does not fit the model: it is {budget.prompt} tokens (the system "
                                "prompt), more than the model's context of 1024 tokens before any answer; shorten "
                                "the system prompt")


def test_the_count_is_fast_enough_for_a_launch_request(tokenizer):
    import time

    scenarios = [Scenario(id=f"s{i}", user_message="word " * (i % 50)) for i in range(5000)]
    started = time.perf_counter()
    prompt_budget(tokenizer, context=1024, system_prompt=SYSTEM, tools=None, scenarios=scenarios, max_tokens=64)
    assert time.perf_counter() - started < 5.0
