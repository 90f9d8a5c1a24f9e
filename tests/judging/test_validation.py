"""Unusable judge replies are fed back for a corrective retry, then end in a JudgeError naming the problem.
Nothing is clamped or dropped silently."""
from __future__ import annotations

import pytest

import judging
from judging import JudgeError
from tests.judge_double import JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory

GOOD = JudgeDouble.scores_reply({"1": 0.25, "2": 0.5, "3": 0.75})


def _item(tid: str, score: object) -> dict:
    return {"trajectory_id": tid, "explanation": "x", "score": score}


BAD_REPLIES = {
    "invalid json": ('{"scores": [ {"trajectory_id": "1", ', "not valid JSON"),
    "empty reply": ("", "empty"),
    "wrong shape": ({"ranking": [1, 2, 3]}, "does not match the schema"),
    "wrong count": ({"scores": [_item("1", 0.2), _item("2", 0.4)]}, "expected exactly 3 scores"),
    "missing id": ({"scores": [_item("1", 0.2), _item("2", 0.4), _item("2", 0.6)]}, "missing trajectory id"),
    "duplicate id": ({"scores": [_item("1", 0.2), _item("1", 0.4), _item("3", 0.6)]}, "duplicate trajectory id"),
    "unknown id": ({"scores": [_item("1", 0.2), _item("2", 0.4), _item("7", 0.6)]}, "unknown trajectory id"),
    "out of range": ({"scores": [_item("1", 7), _item("2", 10), _item("3", 0.5)]}, "score 7.0 is outside 0..1"),
    "negative": ({"scores": [_item("1", -0.1), _item("2", 0.4), _item("3", 0.5)]}, "outside 0..1"),
}


@pytest.mark.parametrize("case", list(BAD_REPLIES))
async def test_a_bad_reply_is_corrected_by_the_retry_that_names_the_problem(judge_double: JudgeDouble,
                                                                              case: str) -> None:
    bad, problem = BAD_REPLIES[case]
    judge_double.queue(bad, GOOD)

    judgement = await judging.score_group([trajectory(0.1), trajectory(0.2), trajectory(0.3)],
                                          **judge_kwargs(judge_double, shuffle=False))

    assert [s.score for s in judgement.scores] == [0.25, 0.5, 0.75]
    assert len(judge_double.requests) == 2
    retry = judge_double.requests[1].messages
    assert retry[-2]["role"] == "assistant"  # the judge sees its own rejected reply ...
    assert problem in retry[-1]["content"]  # ... and what was wrong with it
    assert [c.attempt for c in judgement.calls] == [1, 2]
    assert problem in (judgement.calls[0].rejected or "")
    assert judgement.calls[1].rejected is None


@pytest.mark.parametrize("case", list(BAD_REPLIES))
async def test_a_judge_that_stays_wrong_ends_in_a_judge_error_naming_the_problem(judge_double: JudgeDouble,
                                                                                 case: str) -> None:
    bad, problem = BAD_REPLIES[case]
    judge_double.queue(bad, bad)

    with pytest.raises(JudgeError, match="no usable reply in 2 attempt") as info:
        await judging.ruler([trajectory(0.1), trajectory(0.2), trajectory(0.3)], **judge_kwargs(judge_double))

    assert problem in str(info.value)
    assert len(judge_double.requests) == 2
    assert [c.attempt for c in info.value.calls] == [1, 2]  # the paid calls are kept for accounting


async def test_max_attempts_bounds_the_corrective_retries(judge_double: JudgeDouble) -> None:
    judge_double.queue("nope", "nope", "nope", GOOD)

    scores = await judging.ruler([trajectory(0.1), trajectory(0.2), trajectory(0.3)],
                                 **judge_kwargs(judge_double, max_attempts=4, shuffle=False))

    assert [s.score for s in scores] == [0.25, 0.5, 0.75]
    assert len(judge_double.requests) == 4


async def test_scores_at_the_bounds_are_accepted_unchanged(judge_double: JudgeDouble) -> None:
    judge_double.queue(JudgeDouble.scores_reply({"1": 0.0, "2": 1.0}))
    scores = await judging.ruler([trajectory(0.1), trajectory(0.2)], **judge_kwargs(judge_double, shuffle=False))
    assert [s.score for s in scores] == [0.0, 1.0]


async def test_a_fenced_json_reply_is_read(judge_double: JudgeDouble) -> None:
    import json

    judge_double.queue("```json\n" + json.dumps(JudgeDouble.scores_reply({"1": 0.3, "2": 0.6})) + "\n```")
    scores = await judging.ruler([trajectory(0.1), trajectory(0.2)], **judge_kwargs(judge_double, shuffle=False))
    assert [s.score for s in scores] == [0.3, 0.6]


async def test_an_unknown_option_is_a_judge_error_naming_it(judge_double: JudgeDouble) -> None:
    with pytest.raises(JudgeError, match="pases"):
        await judging.ruler([trajectory(0.1), trajectory(0.2)], **judge_kwargs(judge_double, pases=2))
    assert judge_double.requests == []


async def test_duplicate_criterion_names_are_a_judge_error(judge_double: JudgeDouble) -> None:
    with pytest.raises(JudgeError, match="unique"):
        await judging.ruler([trajectory(0.1), trajectory(0.2)],
                            **judge_kwargs(judge_double, criteria=[{"name": "a"}, {"name": "a", "weight": 2}]))


async def test_an_empty_group_is_a_judge_error() -> None:
    with pytest.raises(JudgeError, match="empty"):
        await judging.ruler([], "openai/judge")
