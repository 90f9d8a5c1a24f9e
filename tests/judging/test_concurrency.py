"""Many groups share one limit on judge requests in flight."""
from __future__ import annotations

import time

import judging
from tests.judge_double import JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory


def _groups(n: int) -> list[list[list[dict]]]:
    return [[trajectory(0.1, tag=f"g{g}"), trajectory(0.9, tag=f"g{g}")] for g in range(n)]


async def test_score_groups_keeps_to_the_concurrency_limit(rule_double: JudgeDouble) -> None:
    rule_double.latency_s = 0.05
    results = await judging.score_groups(_groups(6), concurrency=2, **judge_kwargs(rule_double))

    assert rule_double.max_in_flight == 2
    assert [[s.score for s in r.scores] for r in results] == [[0.1, 0.9]] * 6  # type: ignore[union-attr]


async def test_concurrent_scoring_is_faster_than_one_at_a_time(rule_double: JudgeDouble) -> None:
    rule_double.latency_s = 0.05
    t0 = time.perf_counter()
    await judging.score_groups(_groups(4), concurrency=1, cache=False, **judge_kwargs(rule_double))
    sequential = time.perf_counter() - t0
    t0 = time.perf_counter()
    await judging.score_groups(_groups(4), concurrency=4, cache=False, **judge_kwargs(rule_double))
    concurrent = time.perf_counter() - t0

    assert rule_double.max_in_flight == 4
    assert concurrent < sequential


async def test_a_failing_group_can_be_reported_without_stopping_the_rest(judge_double: JudgeDouble) -> None:
    judge_double.responder = lambda req: ("garbage" if "g1" in req.prompt_text
                                          else JudgeDouble.scores_reply({"1": 0.5, "2": 0.5}))
    done: list[int] = []

    results = await judging.score_groups(_groups(3), concurrency=1, return_exceptions=True,
                                         on_done=lambda i, r: done.append(i), **judge_kwargs(judge_double))

    assert isinstance(results[1], judging.JudgeError)
    assert isinstance(results[0], judging.GroupJudgement) and isinstance(results[2], judging.GroupJudgement)
    assert sorted(done) == [0, 1, 2]
