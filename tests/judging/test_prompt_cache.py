"""Provider prompt caching: the constant prefix marked where the provider needs a mark, nothing extra where it
caches by itself, and each call's cacheable prefix, cached tokens and price with and without the cache discount."""
from __future__ import annotations

import json

import litellm
import pytest

import judging
from tests.judge_double import JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory

CLAUDE = "anthropic/claude-sonnet-4-5"  # litellm: supports prompt caching, Anthropic-style cache_control
GPT = "openai/gpt-4o-mini"  # litellm: supports prompt caching, automatic (no mark)


async def test_a_claude_judge_gets_its_system_message_marked_for_the_prompt_cache(rule_double: JudgeDouble) -> None:
    rubric = "Prefer the answer that cites the refund window."
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)], judge_model=CLAUDE, rubric=rubric,
                                          extra_litellm_params={"api_base": rule_double.url, "api_key": "test"})

    request = rule_double.requests[0]
    assert request.path.endswith("/v1/messages")  # litellm spoke Anthropic's API to the double
    [block] = request.body["system"]
    assert block["cache_control"] == {"type": "ephemeral"} and rubric in block["text"]
    # the mark ends the run-constant part: nothing of the group is inside it, nothing after it is marked
    assert "quality" not in block["text"] and "cache_control" not in json.dumps(request.messages)
    assert [s.score for s in judgement.scores] == [0.2, 0.7]


async def test_an_openai_judge_is_sent_no_cache_mark(rule_double: JudgeDouble) -> None:
    await judging.score_group([trajectory(0.2), trajectory(0.7)], judge_model=GPT,
                              extra_litellm_params=rule_double.litellm_params)

    body = rule_double.requests[0].body
    assert "cache_control" not in json.dumps(body)
    assert isinstance(body["messages"][0]["content"], str)


async def test_the_cacheable_prefix_is_counted_and_is_the_same_for_groups_of_different_sizes(
        rule_double: JudgeDouble) -> None:
    tools = [{"type": "function", "function": {"name": "search_orders", "description": "Find a customer's orders.",
                                               "parameters": {"type": "object"}}}]
    small = await judging.score_group([trajectory(0.2), trajectory(0.7)], tools=tools, **judge_kwargs(rule_double))
    large = await judging.score_group([trajectory(q, turns=3) for q in (0.1, 0.4, 0.6, 0.9)], tools=tools,
                                      **judge_kwargs(rule_double))

    a, b = small.calls[0], large.calls[0]
    assert a.prefix_tokens is not None and a.prefix_tokens > 0
    assert a.prefix_tokens == b.prefix_tokens
    assert a.prefix_tokens < a.counted_tokens < b.counted_tokens  # type: ignore[operator]


async def test_cached_tokens_reported_by_an_openai_judge_are_recorded_and_priced_lower(
        rule_double: JudgeDouble) -> None:
    rule_double.usage, rule_double.cached_tokens = (2000, 100), 1536
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)], judge_model=GPT,
                                          extra_litellm_params=rule_double.litellm_params)

    call = judgement.calls[0]
    info = litellm.get_model_info(GPT)
    assert call.cached_tokens == 1536
    assert call.cost_usd is not None and call.uncached_cost_usd is not None
    discount = 1536 * (info["input_cost_per_token"] - info["cache_read_input_token_cost"])
    assert call.uncached_cost_usd - call.cost_usd == pytest.approx(discount)
    assert call.uncached_cost_usd == pytest.approx(2000 * info["input_cost_per_token"]
                                                   + 100 * info["output_cost_per_token"])


async def test_cache_reads_reported_by_a_claude_judge_are_recorded(rule_double: JudgeDouble) -> None:
    rule_double.usage, rule_double.cached_tokens = (3000, 80), 2048
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)], judge_model=CLAUDE,
                                          extra_litellm_params={"api_base": rule_double.url, "api_key": "test"})

    call = judgement.calls[0]
    info = litellm.get_model_info(CLAUDE)
    assert (call.prompt_tokens, call.cached_tokens) == (3000, 2048)
    assert call.uncached_cost_usd - call.cost_usd == pytest.approx(  # type: ignore[operator]
        2048 * (info["input_cost_per_token"] - info["cache_read_input_token_cost"]))


async def test_a_judge_that_reports_no_cache_use_costs_the_same_either_way(rule_double: JudgeDouble) -> None:
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)], judge_model=GPT,
                                          extra_litellm_params=rule_double.litellm_params)

    call = judgement.calls[0]
    assert not call.cached_tokens
    assert call.cost_usd is not None and call.uncached_cost_usd == pytest.approx(call.cost_usd)


async def test_cache_writes_reported_by_a_claude_judge_are_recorded_and_priced_above_plain_input(
        rule_double: JudgeDouble) -> None:
    rule_double.usage, rule_double.cache_write_tokens = (3000, 80), 1800
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)], judge_model=CLAUDE,
                                          extra_litellm_params={"api_base": rule_double.url, "api_key": "test"})

    call = judgement.calls[0]
    info = litellm.get_model_info(CLAUDE)
    assert (call.prompt_tokens, call.cache_write_tokens) == (3000, 1800)
    assert call.cost_usd - call.uncached_cost_usd == pytest.approx(  # type: ignore[operator]
        1800 * (info["cache_creation_input_token_cost"] - info["input_cost_per_token"]))
