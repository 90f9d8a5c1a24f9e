"""Many groups share one limit on judge requests in flight."""
from __future__ import annotations

import threading

import judging
from tests.judge_double import HttpError, JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory


def _groups(n: int) -> list[list[list[dict]]]:
    return [[trajectory(0.1, tag=f"g{g}"), trajectory(0.9, tag=f"g{g}")] for g in range(n)]


async def test_score_groups_keeps_to_the_concurrency_limit(rule_double: JudgeDouble) -> None:
    rule_double.latency_s = 0.05
    results = await judging.score_groups(_groups(6), concurrency=2, **judge_kwargs(rule_double))

    assert rule_double.max_in_flight == 2
    assert [[s.score for s in r.scores] for r in results] == [[0.1, 0.9]] * 6  # type: ignore[union-attr]


async def test_with_room_for_four_the_judge_is_sent_four_groups_at_once(rule_double: JudgeDouble) -> None:
    """No clock: the double holds every request until the fourth has arrived, so the groups can only be scored
    if all four are in flight together (one at a time, the first would wait in vain and the double answers 503).
    How much faster that is, is measured in bench/judge_bench.py, not asserted here."""
    gate, score = threading.Event(), rule_double.responder
    arrived: list[int] = []

    def hold_until_four(request):
        arrived.append(rule_double.in_flight)
        if rule_double.in_flight >= 4:
            gate.set()
        if not gate.wait(timeout=30):
            return HttpError(503, "the other three groups never came")
        return score(request)

    rule_double.responder = hold_until_four
    results = await judging.score_groups(_groups(4), concurrency=4, cache=False, transport_retries=0,
                                         **judge_kwargs(rule_double))

    assert rule_double.max_in_flight == 4 and len(rule_double.requests) == 4  # no retry of a refused request
    assert [[s.score for s in r.scores] for r in results] == [[0.1, 0.9]] * 4  # type: ignore[union-attr]


async def test_a_failing_group_can_be_reported_without_stopping_the_rest(judge_double: JudgeDouble) -> None:
    judge_double.responder = lambda req: ("garbage" if "g1" in req.prompt_text
                                          else JudgeDouble.scores_reply({"1": 0.5, "2": 0.5}))
    done: list[int] = []

    results = await judging.score_groups(_groups(3), concurrency=1, return_exceptions=True,
                                         on_done=lambda i, r: done.append(i), **judge_kwargs(judge_double))

    assert isinstance(results[1], judging.JudgeError)
    assert isinstance(results[0], judging.GroupJudgement) and isinstance(results[2], judging.GroupJudgement)
    assert sorted(done) == [0, 1, 2]
