"""Per-call accounting: tokens, cost (unknown stays unknown), latency, prompt hash, raw reply."""
from __future__ import annotations

import judging
from tests.judge_double import JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory


async def test_an_unpriced_model_reports_its_cost_as_unknown_not_zero(rule_double: JudgeDouble) -> None:
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double))

    call = judgement.calls[0]
    assert call.cost_usd is None
    assert judgement.cost_usd is None


async def test_a_priced_model_reports_its_cost(rule_double: JudgeDouble) -> None:
    # litellm knows gpt-4o-mini's price; the double reports 120 prompt + 30 completion tokens
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.6)], judge_model="openai/gpt-4o-mini",
                                          extra_litellm_params=rule_double.litellm_params)
    assert judgement.calls[0].cost_usd is not None and judgement.calls[0].cost_usd > 0
    assert judgement.cost_usd == judgement.calls[0].cost_usd


async def test_every_call_records_tokens_latency_hash_and_raw_reply(rule_double: JudgeDouble) -> None:
    rule_double.usage = (321, 45)
    judgement = await judging.score_group([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double, passes=3))

    assert len(judgement.calls) == 3
    for call in judgement.calls:
        assert (call.prompt_tokens, call.completion_tokens) == (321, 45)
        assert call.latency_s > 0
        assert len(call.prompt_hash) == 64
        assert '"scores"' in (call.raw_reply or "")
        assert call.cache_hit is False
    assert judgement.prompt_tokens == 3 * 321 and judgement.completion_tokens == 3 * 45
    assert judgement.summary()["requests"] == 3
