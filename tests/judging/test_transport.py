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

    with pytest.raises(JudgeError, match="the API refused the key"):
        await judging.ruler([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double))
    assert len(rule_double.requests) == 1


@pytest.mark.parametrize("status, cause, requests", [
    (401, "the API refused the key", 1),
    (403, "the API refused the key", 1),
    (404, "the API does not know this model or address", 1),
    (400, "the API rejected the request", 1),
    (429, "the API is rate-limiting", 2),
    (500, "the server failed with an error of its own", 2),
    (503, "the server failed with an error of its own", 2),
])
async def test_each_failure_names_its_own_cause_and_only_passing_ones_are_retried(
        rule_double: JudgeDouble, status: int, cause: str, requests: int) -> None:
    rule_double.fail_next(status, times=5)

    with pytest.raises(JudgeError) as raised:
        await judging.ruler([trajectory(0.2), trajectory(0.6)], **judge_kwargs(rule_double, transport_retries=1))
    assert f"judge {rule_double.model}: {cause}: " in str(raised.value)
    assert len(rule_double.requests) == requests


async def test_a_server_that_is_not_there_is_unreachable_not_a_server_error(rule_double: JudgeDouble) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    params = {"api_base": f"http://127.0.0.1:{closed}/v1", "api_key": "test"}

    with pytest.raises(JudgeError, match=r"judge openai/judge: the server could not be reached: .*check that the "
                                         r"server is up"):
        await judging.ruler([trajectory(0.2), trajectory(0.6)], judge_model="openai/judge",
                            extra_litellm_params=params, backoff_s=0.0, transport_retries=0, cache=False)


async def test_a_missing_key_says_so_at_once_instead_of_blaming_the_server(monkeypatch) -> None:
    # OpenAI's client refuses to send without a key; litellm reports that as an InternalServerError (a 500).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(JudgeError) as raised:
        await judging.ruler([trajectory(0.2), trajectory(0.6)], judge_model="openai/gpt-4o-mini",
                            extra_litellm_params={"timeout": 5}, backoff_s=5.0, transport_retries=3, cache=False)
    message = str(raised.value)
    assert message.startswith("judge openai/gpt-4o-mini: no API key was sent: ")
    assert "persisted after" not in message  # not retried: a key does not appear by waiting
