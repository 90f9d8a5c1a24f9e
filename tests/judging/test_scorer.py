"""studio.scoring: the judge as the training loop's scorer, configured from a run config's judge section."""
from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from judging import JudgeError
from studio.scoring import judge_scorer_from_config
from tests.judge_double import JudgeDouble
from tests.judging.groups import trajectory
from training.types import Scenario, Score, Trajectory, TrajectoryGroup


def _group(qualities: list[float], env: list[float | None]) -> TrajectoryGroup:
    scenario = Scenario(id="refund", user_message="What is the refund policy?", reference="30 days.")
    return TrajectoryGroup(scenario=scenario, trajectories=[
        Trajectory(scenario_id="refund", messages=trajectory(q), env_reward=e) for q, e in zip(qualities, env)])


def _config(double: JudgeDouble, **extra: object) -> dict:
    return {"judge_model": double.model, "api_base": double.api_base, "api_key_env": "JUDGE_TEST_KEY", **extra}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_TEST_KEY", "test")


async def test_the_scorer_returns_judge_scores_in_group_order(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double))

    scores = await scorer(_group([0.3, 0.9, 0.6], [None, None, None]))

    assert [s.reward for s in scores] == [0.3, 0.9, 0.6]
    assert all(isinstance(s, Score) and s.judge_score == s.reward for s in scores)
    assert scores[1].explanation == "rule gave 0.900"
    assert "30 days." in rule_double.requests[0].prompt_text  # the scenario's reference reaches the judge
    assert rule_double.requests[0].headers.get("authorization") == "Bearer test"


async def test_each_group_carries_its_judge_report(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double, passes=2))
    group = _group([0.2, 0.8], [None, None])

    await scorer(group)

    report = group.judge_report
    assert report is not None and report.judge_model == rule_double.model and report.passes == 2
    assert len(report.calls) == 2 == report.requests and report.cache_hits == 0
    assert report.cost_usd is None and report.prompt_tokens == 240 and report.completion_tokens == 60
    # what the web app stores per call for the run's prompt-caching report
    assert all(0 < c["prefix_tokens"] < c["counted_tokens"] for c in report.calls)


async def test_a_cache_hit_is_reported_apart_and_costs_nothing(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double))
    first, again = _group([0.2, 0.8], [None, None]), _group([0.2, 0.8], [None, None])

    await scorer(first)
    await scorer(again)

    assert len(rule_double.requests) == 1
    assert (first.judge_report.requests, first.judge_report.cache_hits) == (1, 0)
    report = again.judge_report
    assert (report.requests, report.cache_hits, report.prompt_tokens) == (0, 1, 0)
    assert report.cost_usd == 0.0 and report.calls[0]["cache_hit"] and report.calls[0]["cost_usd"] == 0.0


async def test_a_group_of_identical_trajectories_is_not_sent_and_trains_nothing(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double))
    group = _group([0.5, 0.5, 0.5], [None, None, None])

    scores = await scorer(group)

    assert rule_double.requests == []
    assert all(s.reward is None and s.judge_score is None for s in scores)
    assert group.judge_report.identical and group.judge_report.requests == 0 and group.judge_report.calls == []


async def test_temperature_zero_is_sent(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double, temperature=0.0))

    await scorer(_group([0.2, 0.8], [None, None]))

    assert rule_double.requests[0].body["temperature"] == 0.0


async def test_a_group_the_judge_cannot_score_still_reports_what_its_attempts_cost(judge_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(judge_double, cache=False))
    group = _group([0.2, 0.8], [None, None])
    judge_double.queue(JudgeDouble.scores_reply({"1": 7.0, "2": 0.5}), JudgeDouble.scores_reply({"1": 15.0, "2": 0.5}))

    with pytest.raises(JudgeError, match="score 15.0 is outside 0..1"):
        await scorer(group)

    assert group.judge_report.requests == 2 == len(group.judge_report.calls) == len(judge_double.requests)
    assert group.judge_report.prompt_tokens == 240


async def test_the_groups_tools_are_shown_once(rule_double: JudgeDouble) -> None:
    lookup = {"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}
    group = _group([0.2, 0.8], [None, None])
    for t in group.trajectories:
        t.tools = [lookup]

    await judge_scorer_from_config(_config(rule_double))(group)

    assert rule_double.requests[0].prompt_text.count("lookup_order") == 1


async def test_weighted_combine_blends_judge_and_env_reward(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double, combine="weighted", judge_weight=3, env_weight=1))

    scores = await scorer(_group([0.2, 0.8], [1.0, 0.0]))

    assert [s.reward for s in scores] == pytest.approx([(3 * 0.2 + 1.0) / 4, (3 * 0.8 + 0.0) / 4])
    assert [s.judge_score for s in scores] == [0.2, 0.8]


async def test_env_combine_trains_on_the_env_reward_but_keeps_the_judge_score(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double, combine="env"))

    scores = await scorer(_group([0.2, 0.8], [1.0, 0.0]))

    assert [s.reward for s in scores] == [1.0, 0.0]
    assert [s.judge_score for s in scores] == [0.2, 0.8]


async def test_combining_with_a_missing_env_reward_is_a_judge_error(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double, combine="weighted"))
    with pytest.raises(JudgeError, match="needs an env reward"):
        await scorer(_group([0.2, 0.8], [1.0, None]))


async def test_criteria_reach_the_score(rule_double: JudgeDouble) -> None:
    scorer = judge_scorer_from_config(_config(rule_double, criteria=[{"name": "faithful", "weight": 2},
                                                                     {"name": "concise"}]))
    scores = await scorer(_group([0.2, 0.8], [None, None]))
    assert scores[1].criteria == {"faithful": 0.8, "concise": 0.8}


def test_an_unknown_or_bad_option_is_a_judge_error_naming_it() -> None:
    with pytest.raises(JudgeError, match="judge.temprature"):
        judge_scorer_from_config({"judge_model": "openai/judge", "temprature": 0.2})
    with pytest.raises(JudgeError, match="judge.combine"):
        judge_scorer_from_config({"judge_model": "openai/judge", "combine": "max"})


def test_a_missing_api_key_variable_fails_when_the_scorer_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_TEST_KEY")
    with pytest.raises(JudgeError, match="JUDGE_TEST_KEY"):
        judge_scorer_from_config({"judge_model": "openai/judge", "api_key_env": "JUDGE_TEST_KEY"})


def test_the_engine_finds_the_scorer_through_its_entry_point() -> None:
    (ep,) = [e for e in entry_points(group="rubric_studio.scorers") if e.name == "judge"]
    assert ep.value == "studio.scoring:judge_scorer_from_config"
    assert ep.load() is judge_scorer_from_config


def _naming_responder(request):
    """Explains every trajectory by the judge's own numbers, as judges do: "Attempt 2, beside attempt 1."""
    from tests.judging.groups import quality_rule

    scores = {tid: quality_rule(text) for tid, text in request.trajectory_blocks().items()}
    best = max(scores, key=scores.get)
    return {"scores": [{"trajectory_id": tid, "score": s, "explanation": f"Attempt {tid}, beside attempt #{best}."}
                       for tid, s in scores.items()]}


async def test_explanations_name_trajectories_by_their_labels_not_by_the_judges_shuffled_numbers(
        judge_double: JudgeDouble) -> None:
    judge_double.responder = _naming_responder
    scorer = judge_scorer_from_config(_config(judge_double))
    group = _group([0.3, 0.9, 0.6, 0.9], [None] * 4)  # B and D are identical: the judge sees them once

    scores = await scorer(group)

    shown = judge_double.requests[0].trajectory_blocks()
    assert len(shown) == 3 and "quality 0.30" not in shown["1"]  # shuffled: the judge's 1 is not A
    assert [s.explanation for s in scores] == [
        "Attempt A, beside attempt B/D.", "Attempt B, beside attempt B.", "Attempt C, beside attempt B/D.",
        "Attempt D, beside attempt D."]
