"""Scores reach the right trajectory: by id, through shuffling, passes, criteria and duplicates."""
from __future__ import annotations

import pytest

import judging
from judging import JudgeError
from tests.judge_double import JudgeDouble, RecordedRequest
from tests.judging.groups import judge_kwargs, quality_rule, trajectory


async def test_ids_map_correctly_when_the_reply_lists_them_out_of_order(judge_double: JudgeDouble) -> None:
    judge_double.queue(JudgeDouble.scores_reply({"3": 0.9, "1": 0.1, "2": 0.5}))

    scores = await judging.ruler([trajectory(0.1), trajectory(0.5), trajectory(0.9)],
                                 **judge_kwargs(judge_double, shuffle=False))

    assert [s.trajectory_id for s in scores] == ["1", "2", "3"]
    assert [s.score for s in scores] == [0.1, 0.5, 0.9]
    assert [s.explanation for s in scores] == ["scripted 1", "scripted 2", "scripted 3"]


async def test_shuffled_presentation_maps_back_to_input_order(rule_double: JudgeDouble) -> None:
    qualities = [0.11, 0.22, 0.33, 0.44, 0.55, 0.66, 0.77, 0.88]

    judgement = await judging.score_group([trajectory(q) for q in qualities], **judge_kwargs(rule_double))

    order = judgement.calls[0].order
    assert order != sorted(order), "the judge should have seen a shuffled order"
    assert [s.score for s in judgement.scores] == qualities
    # what the judge saw as id 1 is the input at order[0]
    blocks = rule_double.requests[0].trajectory_blocks()
    assert f"quality {qualities[order[0]]:.2f}" in blocks["1"]


async def test_the_shuffle_is_reproducible_and_varies_with_the_seed(rule_double: JudgeDouble) -> None:
    group = [trajectory(q) for q in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)]
    first = await judging.score_group(group, **judge_kwargs(rule_double, cache=False))
    again = await judging.score_group(group, **judge_kwargs(rule_double, cache=False))
    other = await judging.score_group(group, **judge_kwargs(rule_double, cache=False, seed=7))

    assert first.calls[0].order == again.calls[0].order
    assert first.calls[0].order != other.calls[0].order


async def test_passes_average_and_report_their_disagreement(judge_double: JudgeDouble) -> None:
    def position_biased(request: RecordedRequest) -> dict:
        # a judge that adds 0.2 to whatever it is shown first
        blocks = request.trajectory_blocks()
        return JudgeDouble.scores_reply({tid: quality_rule(text) + (0.2 if tid == "1" else 0.0)
                                         for tid, text in blocks.items()})

    judge_double.responder = position_biased
    judgement = await judging.score_group([trajectory(0.1), trajectory(0.7)], **judge_kwargs(judge_double, passes=2))

    assert len(judge_double.requests) == 2
    assert sorted(c.order for c in judgement.calls) == [[0, 1], [1, 0]]  # both orders were shown
    assert [s.score for s in judgement.scores] == pytest.approx([0.2, 0.8])  # the bias averages out
    assert sorted(judgement.scores[0].pass_scores) == pytest.approx([0.1, 0.3])
    assert judgement.disagreement == pytest.approx(0.1)  # population std of (x, x + 0.2)


async def test_a_single_pass_reports_no_disagreement(rule_double: JudgeDouble) -> None:
    judgement = await judging.score_group([trajectory(0.1), trajectory(0.9)], **judge_kwargs(rule_double))
    assert judgement.disagreement is None


async def test_criteria_give_per_criterion_scores_and_the_weighted_total(judge_double: JudgeDouble) -> None:
    criteria = [{"name": "faithful", "description": "only what the context says", "weight": 3},
                {"name": "concise", "weight": 1}]
    judge_double.queue({"scores": [
        {"trajectory_id": "1", "explanation": "a", "criteria": {"faithful": 1.0, "concise": 0.2}},
        {"trajectory_id": "2", "explanation": "b", "criteria": {"faithful": 0.4, "concise": 1.0}},
    ]})

    scores = await judging.ruler([trajectory(0.1), trajectory(0.9)],
                                 **judge_kwargs(judge_double, criteria=criteria, shuffle=False))

    assert scores[0].criteria == {"faithful": 1.0, "concise": 0.2}
    assert scores[0].score == pytest.approx((3 * 1.0 + 1 * 0.2) / 4)
    assert scores[1].score == pytest.approx((3 * 0.4 + 1 * 1.0) / 4)
    request = judge_double.requests[0]
    assert request.criteria_names() == ["faithful", "concise"]
    assert "only what the context says" in request.messages[0]["content"]


async def test_a_reply_missing_a_criterion_is_rejected(judge_double: JudgeDouble) -> None:
    judge_double.queue(
        {"scores": [{"trajectory_id": "1", "explanation": "a", "criteria": {"faithful": 1.0}}]},
        {"scores": [{"trajectory_id": "1", "explanation": "a", "criteria": {"faithful": 1.0}}]},
    )
    with pytest.raises(JudgeError, match="concise"):
        await judging.ruler([trajectory(0.1), trajectory(0.1, tag="x")],
                            **judge_kwargs(judge_double, criteria=[{"name": "faithful"}, {"name": "concise"}]))


async def test_identical_trajectories_get_one_absolute_score_copied_to_all(judge_double: JudgeDouble) -> None:
    judge_double.queue(JudgeDouble.scores_reply({"1": 0.7}, "fine"))

    judgement = await judging.score_group([trajectory(0.5)] * 4, **judge_kwargs(judge_double))

    assert judgement.identical is True
    assert judgement.distinct == 1
    assert [s.score for s in judgement.scores] == [0.7] * 4
    assert [s.trajectory_id for s in judgement.scores] == ["1", "2", "3", "4"]
    assert all(s.absolute for s in judgement.scores)  # what an ART-style `ruler` caller sees


async def test_ruler_tells_its_caller_when_a_group_was_scored_absolutely(judge_double: JudgeDouble) -> None:
    judge_double.queue(JudgeDouble.scores_reply({"1": 0.7}, "fine"))
    judge_double.queue(JudgeDouble.scores_reply({"1": 0.2, "2": 0.9}, "ranked"))
    same = await judging.ruler([trajectory(0.5)] * 2, **judge_kwargs(judge_double))
    ranked = await judging.ruler([trajectory(0.5), trajectory(0.6)], **judge_kwargs(judge_double))
    assert [s.absolute for s in same] == [True, True] and [s.absolute for s in ranked] == [False, False]
    request = judge_double.requests[0]
    assert len(request.trajectory_blocks()) == 1
    assert "absolute scale" in request.messages[0]["content"]


async def test_duplicate_trajectories_are_shown_once_and_share_a_score(rule_double: JudgeDouble) -> None:
    group = [trajectory(0.3), trajectory(0.8), trajectory(0.3), trajectory(0.6)]

    judgement = await judging.score_group(group, **judge_kwargs(rule_double))

    assert judgement.distinct == 3 and judgement.identical is False
    assert len(rule_double.requests[0].trajectory_blocks()) == 3
    assert [s.score for s in judgement.scores] == [0.3, 0.8, 0.3, 0.6]


async def test_openai_style_message_objects_are_accepted(rule_double: JudgeDouble) -> None:
    from pydantic import BaseModel

    class Msg(BaseModel):  # stands in for the openai client's message objects, which are pydantic models
        role: str
        content: str | None = None

    group = [[Msg(role="user", content="hi"), Msg(role="assistant", content=f"quality {q}")] for q in (0.2, 0.7)]
    scores = await judging.ruler(group, **judge_kwargs(rule_double))
    assert [s.score for s in scores] == [0.2, 0.7]


async def test_integer_ids_from_a_judge_without_structured_output_are_accepted_at_once(
        judge_double: JudgeDouble) -> None:
    judge_double.queue({"scores": [{"trajectory_id": 2, "explanation": "b", "score": 0.7},
                                   {"trajectory_id": 1, "explanation": "a", "score": 0.2}]})

    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)],
                                          **judge_kwargs(judge_double, shuffle=False))

    assert len(judge_double.requests) == 1  # no corrective retry spent on the id's type
    assert [(s.trajectory_id, s.score, s.explanation) for s in judgement.scores] == [("1", 0.2, "a"), ("2", 0.7, "b")]


async def test_a_boolean_id_is_still_rejected(judge_double: JudgeDouble) -> None:
    judge_double.queue({"scores": [{"trajectory_id": True, "explanation": "a", "score": 0.2},
                                   {"trajectory_id": 2, "explanation": "b", "score": 0.7}]},
                       JudgeDouble.scores_reply({"1": 0.2, "2": 0.7}))

    judgement = await judging.score_group([trajectory(0.2), trajectory(0.7)],
                                          **judge_kwargs(judge_double, shuffle=False))

    assert len(judge_double.requests) == 2 and judgement.calls[0].rejected
