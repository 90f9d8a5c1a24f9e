"""What the judge is sent: one request per group, shared prefix once, tools once, rubric in the system message."""
from __future__ import annotations

import json

import judging
from tests.judge_double import JudgeDouble
from tests.judging.groups import SYSTEM, USER, judge_kwargs, trajectory


async def test_the_shared_prefix_appears_once_in_the_request(rule_double: JudgeDouble) -> None:
    await judging.ruler([trajectory(q, turns=3) for q in (0.2, 0.5, 0.8, 0.4)], **judge_kwargs(rule_double))

    assert len(rule_double.requests) == 1
    prompt = rule_double.requests[0].prompt_text
    assert prompt.count(SYSTEM["content"]) == 1
    assert prompt.count(USER["content"]) == 1
    # the follow-ups differ in position only after the first answers diverge, so they stay per trajectory
    assert prompt.count("follow-up 1") == 4
    assert len(rule_double.requests[0].trajectory_blocks()) == 4


async def test_each_trajectory_keeps_its_own_messages_under_its_id(rule_double: JudgeDouble) -> None:
    await judging.ruler([trajectory(0.1, tag="alpha"), trajectory(0.9, tag="beta")],
                        **judge_kwargs(rule_double, shuffle=False))

    blocks = rule_double.requests[0].trajectory_blocks()
    assert json.loads(blocks["1"]) == [{"role": "assistant", "content": "answer alpha turn 0 quality 0.10"}]
    assert json.loads(blocks["2"]) == [{"role": "assistant", "content": "answer beta turn 0 quality 0.90"}]


async def test_the_rubric_goes_into_the_system_message(rule_double: JudgeDouble) -> None:
    rubric = "Prefer concise and clear answers; penalise emojis."
    await judging.ruler([trajectory(0.3), trajectory(0.6)], rubric=rubric, **judge_kwargs(rule_double))

    system = rule_double.requests[0].messages[0]
    assert system["role"] == "system"
    assert rubric in system["content"]
    assert "exactly 2 item(s)" in system["content"]
    assert rubric not in rule_double.requests[0].messages[1]["content"]


async def test_the_default_rubric_is_used_when_none_is_given(rule_double: JudgeDouble) -> None:
    await judging.ruler([trajectory(0.3), trajectory(0.6)], **judge_kwargs(rule_double))

    assert judging.DEFAULT_RUBRIC in rule_double.requests[0].messages[0]["content"]


async def test_tools_and_the_reference_answer_are_shown_once(rule_double: JudgeDouble) -> None:
    tools = [{"type": "function", "function": {"name": "search_orders", "parameters": {"type": "object"}}}]
    await judging.ruler([trajectory(0.3), trajectory(0.6), trajectory(0.9)], tools=tools,
                        **judge_kwargs(rule_double, reference="Refunds within 30 days."))

    user = rule_double.requests[0].messages[1]["content"]
    assert user.count("search_orders") == 1
    assert user.count("Refunds within 30 days.") == 1


async def test_the_reply_schema_is_sent_as_a_strict_response_format(rule_double: JudgeDouble) -> None:
    await judging.ruler([trajectory(0.3), trajectory(0.6)], **judge_kwargs(rule_double))

    fmt = rule_double.requests[0].body["response_format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    item = next(iter(schema["$defs"].values()))
    assert set(item["required"]) == {"trajectory_id", "explanation", "score"}
    assert item["additionalProperties"] is False


def test_the_common_prefix_never_swallows_a_whole_trajectory() -> None:
    from judging.prompt import common_prefix_length

    a = [SYSTEM, USER]
    b = [SYSTEM, USER, {"role": "assistant", "content": "x"}]
    assert common_prefix_length([a, b]) == 1  # a keeps USER as its own message
    assert common_prefix_length([b, b + [USER]]) == 2
    assert common_prefix_length([[SYSTEM], [USER]]) == 0
