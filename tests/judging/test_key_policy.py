"""The engine's side of the judge key policy (studio/key_policy.py): what the worker passes, it enforces."""
from __future__ import annotations

import json

import pytest

from judging import JudgeError
from studio.key_policy import POLICY_ENV, key_policy_refusal, parse_key_policy
from studio.scoring import judge_scorer_from_config
from tests.judge_double import JudgeDouble
from tests.judging.test_scorer import _group


async def test_an_endpoint_with_no_key_named_never_gets_the_providers_usual_variable(
        rule_double: JudgeDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker")
    monkeypatch.setenv(POLICY_ENV, json.dumps({"OPENAI_API_KEY": ["https://api.openai.com/v1"]}))
    scorer = judge_scorer_from_config({"judge_model": rule_double.model, "api_base": rule_double.api_base})
    await scorer(_group([0.3, 0.9], [None, None]))
    assert "sk-worker" not in rule_double.requests[0].headers.get("authorization", "")


def test_a_key_sent_elsewhere_is_refused_before_any_rollout(rule_double: JudgeDouble,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker")
    monkeypatch.setenv(POLICY_ENV, json.dumps({"OPENAI_API_KEY": ["https://api.openai.com/v1"]}))
    with pytest.raises(JudgeError, match="OPENAI_API_KEY may only be sent to https://api.openai.com/v1"):
        judge_scorer_from_config({"judge_model": rule_double.model, "api_base": rule_double.api_base,
                                  "api_key_env": "OPENAI_API_KEY"})
    assert rule_double.requests == []


@pytest.mark.parametrize("text, message", [
    ("not json", "is not JSON"),
    ('["OPENAI_API_KEY"]', "must map key variables to lists of endpoints"),
    ('{"OPENAI_API_KEY": "https://api.openai.com/v1"}', "must map key variables to lists of endpoints"),
])
def test_a_malformed_policy_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_key_policy(text)


def test_the_runs_own_stored_key_and_the_default_endpoint_follow_the_policy() -> None:
    policy = parse_key_policy('{"GROQ_API_KEY": [""], "OPENAI_API_KEY": ["https://api.openai.com/v1/"]}')
    assert key_policy_refusal(policy, api_key_env="STUDIO_JUDGE_API_KEY", api_base="https://any.example") is None
    assert key_policy_refusal(policy, api_key_env="GROQ_API_KEY", api_base=None) is None
    assert key_policy_refusal(policy, api_key_env="GROQ_API_KEY", api_base="https://x.example/v1") is not None
    assert key_policy_refusal(policy, api_key_env="OPENAI_API_KEY", api_base="https://api.openai.com/v1") is None
