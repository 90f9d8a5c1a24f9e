"""Timeouts, 429 and 5xx are retried with backoff; errors retrying cannot fix are reported at once."""
from __future__ import annotations

import pytest

import judging
from judging import JudgeError
from tests.judge_double import JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transport_errors_are_retried(rule_double: JudgeDouble, status: int) -> None:
    rule_double.fail_next(status, times=2)

    judgement = await judging.score_group([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double))

    assert [s.score for s in judgement.scores] == [0.2, 0.6]
    assert len(rule_double.requests) == 3
    assert judgement.calls[0].transport_retries == 2


async def test_retries_back_off_between_attempts(rule_double: JudgeDouble) -> None:
    rule_double.fail_next(429, times=2)

    await judging.ruler([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double, backoff_s=0.05))

    t = [r.received_at for r in rule_double.requests]
    assert t[1] - t[0] >= 0.05 * 0.5  # first delay: backoff_s with jitter in [0.5, 1)
    assert t[2] - t[1] >= 0.1 * 0.5  # doubled


async def test_a_retry_after_header_is_honoured(rule_double: JudgeDouble) -> None:
    rule_double.fail_next(429, retry_after=0.3)

    await judging.ruler([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double))

    t = [r.received_at for r in rule_double.requests]
    assert t[1] - t[0] >= 0.3


async def test_a_judge_that_stays_down_ends_in_a_judge_error(rule_double: JudgeDouble) -> None:
    rule_double.fail_next(500, times=10)

    with pytest.raises(JudgeError, match="after 2 retries"):
        await judging.ruler([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double, transport_retries=2))
    assert len(rule_double.requests) == 3


async def test_a_timeout_is_retried(rule_double: JudgeDouble) -> None:
    rule_double.latency_s = 0.5
    params = {**rule_double.litellm_params, "timeout": 0.2}

    with pytest.raises(JudgeError, match="Timeout"):
        await judging.ruler([trajectory(0.2), trajectory(0.6)], judge_model=rule_double.model,
                            extra_litellm_params=params, backoff_s=0.0, transport_retries=1)
    assert len(rule_double.requests) == 2


async def test_bad_credentials_fail_at_once_with_advice(rule_double: JudgeDouble) -> None:
    rule_double.fail_next(401)

    with pytest.raises(JudgeError, match="credentials"):
        await judging.ruler([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double))
    assert len(rule_double.requests) == 1
