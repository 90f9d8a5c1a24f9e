"""Runs that share a judge key share its budget (issue 49; studio/key_budget): in Redis and in file locks alike,
two runs' scorers in two processes never have more requests in flight at the judge than the key allows (and both
get their turn), a holder killed mid-request frees its slot, the key's rate spaces the requests of every run, and a
waiter that gives up leaves the queue. A budget that cannot be reached is an outage, never a request past it."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from judging import ConcurrencyLimit, JudgeError
from studio.key_budget import BUDGET_ENV, BudgetSpec, KeyBudget, KeyLimit, parse_key_limits
from studio.scoring import judge_scorer_from_config
from tests.judge_double import JudgeDouble, RecordedRequest
from tests.studio.budget_runs import KEY, judge_config, score

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["redis", "file"])
def spec_for(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., BudgetSpec]:
    """Builds the budget of KEY in the store under test: Redis (a prefix of the test's own) or a folder of locks."""
    if request.param == "redis":
        store, prefix = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/13", f"test-{uuid.uuid4().hex}"
    else:
        store, prefix = str(tmp_path / "judge-budget"), "studio"
    return lambda **limit: BudgetSpec(store=store, prefix=prefix, limits={KEY: KeyLimit(**limit)})


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "test")


def _other_run(spec: BudgetSpec, *args: Any) -> subprocess.Popen[str]:
    """Another run's scorer (tests/studio/budget_runs.py) in a process of its own, given the budget as the web app
    gives it to an engine."""
    env = {**os.environ, BUDGET_ENV: spec.model_dump_json(), KEY: "test"}
    return subprocess.Popen([sys.executable, "-m", "tests.studio.budget_runs", *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


def _tag(request: RecordedRequest) -> str:
    return "child" if "answer child/" in request.prompt_text else "here"


def _warm_up() -> None:
    """litellm's import and its tokenizer, loaded before the timed part rather than in this run's first request."""
    from judging.llm import count_prefix

    count_prefix("openai/judge", [{"role": "system", "content": "warm"}], {"type": "object"})


async def _until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_two_runs_on_one_key_never_exceed_its_shared_limit(judge_double: JudgeDouble, spec_for) -> None:
    spec = spec_for(concurrency=3)
    child = _other_run(spec, judge_double.api_base, "child", 6, 4)  # starts while this process gets ready
    go = threading.Event()  # the other run's first requests wait until this run waits for the key too
    score_rule = JudgeDouble.score_by(lambda text: 0.8 if "quality 0.8" in text else 0.2)

    def slow(request: RecordedRequest) -> Any:
        go.wait(30)
        time.sleep(0.1)
        return score_rule(request)

    judge_double.responder = slow
    _warm_up()
    waits: list[tuple[str, str, float]] = []
    scorer = judge_scorer_from_config(judge_config(judge_double.api_base, 4),
                                      budget=KeyBudget(spec, on_wait=lambda *w: (waits.append(w), go.set())))
    try:
        await _until(lambda: len(judge_double.requests) == 3)  # the other run holds all of the key's slots
        # Each run alone would send 4 at once, together 8: the key allows 3.
        assert await score(scorer, "here", 5) == 5
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()
        go.set()
    assert out.strip() == "scored 6" and child.returncode == 0
    assert len(judge_double.requests) == 11
    assert judge_double.max_in_flight == 3  # the key's limit, reached and never passed
    # Both got their turn: this run queued for the key before the other run's 5th and 6th requests did (they
    # follow its first answers, which wait for this run to queue), so its first request went ahead of them.
    # An order, not a moment both were at the judge: that depends on when each process polls.
    tags = [_tag(r) for r in judge_double.requests]
    assert tags.index("here") < [i for i, tag in enumerate(tags) if tag == "child"][4], tags
    assert waits and waits[0] == (KEY, "concurrency", 3.0)  # the run said it waited for the key's budget


async def test_a_holder_killed_mid_request_frees_its_slot(judge_double: JudgeDouble, spec_for) -> None:
    spec = spec_for(concurrency=1, lease_s=1.0)
    stuck = threading.Event()  # the other run's request never gets an answer: it is killed first
    score_rule = JudgeDouble.score_by(lambda text: 0.5)

    def answer(request: RecordedRequest) -> Any:
        if _tag(request) == "child":
            stuck.wait(30)
        return score_rule(request)

    judge_double.responder = answer
    waits: list[Any] = []
    scorer = judge_scorer_from_config(judge_config(judge_double.api_base, 1),
                                      budget=KeyBudget(spec, on_wait=lambda *w: waits.append(w)))
    child = _other_run(spec, "hold", judge_double.api_base)
    try:
        _warm_up()
        await _until(lambda: len(judge_double.requests) == 1)  # the other process holds the key's one slot
        scoring = asyncio.ensure_future(score(scorer, "here", 1))
        await _until(lambda: bool(waits))  # ... so this run waits for it
        assert len(judge_double.requests) == 1
        child.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        assert await asyncio.wait_for(scoring, timeout=20) == 1
    finally:
        child.kill()
        stuck.set()
    assert [_tag(r) for r in judge_double.requests] == ["child", "here"]
    assert judge_double.requests[1].received_at >= killed  # it went once the holder was gone, not before


async def test_the_keys_rate_spaces_the_requests_of_every_run(judge_double: JudgeDouble, spec_for) -> None:
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.5)
    await score(judge_scorer_from_config(judge_config(judge_double.api_base, 1)), "warm-up", 1)  # no budget
    spec = spec_for(per_minute=60)  # one request start a second, for all runs together
    # Two runs' scorers, each with a budget of its own: they share nothing but the store.
    first, second = (judge_scorer_from_config(judge_config(judge_double.api_base, 8), budget=KeyBudget(spec))
                     for _ in range(2))

    began = time.monotonic()
    await asyncio.gather(score(first, "here", 2), score(second, "here-too", 2))

    starts = sorted(r.received_at for r in judge_double.requests[1:])
    assert len(starts) == 4
    # The k-th request may start k seconds after the first reservation, which is after `began`; without the budget
    # all four come within a fraction of a second. A bound from below: a busy machine can only make a request later
    # than its turn (two may then arrive close together: gaps between arrivals are not what the budget promises).
    assert all(start - began >= k - 0.01 for k, start in enumerate(starts)), [s - began for s in starts]


def test_limits_name_judge_key_variables_and_limit_something() -> None:
    limits = parse_key_limits('{"OPENAI_API_KEY": {"concurrency": 8, "per_minute": 600}}')
    assert limits["OPENAI_API_KEY"].concurrency == 8 and limits["OPENAI_API_KEY"].per_minute == 600
    for text, said in [('{"DATABASE_URL": {"concurrency": 1}}', "not a judge key variable"),
                       ('{"OPENAI_API_KEY": {}}', "give concurrency, per_minute or both"),
                       ('{"OPENAI_API_KEY": {"concurrency": 0}}', "concurrency"),
                       ('{"OPENAI_API_KEY": {"concurency": 2}}', "concurency"),
                       ('["OPENAI_API_KEY"]', "must map key variables"), ("{", "is not JSON")]:
        with pytest.raises(ValueError, match=said):
            parse_key_limits(text)


async def test_a_budget_that_cannot_be_reached_is_an_outage_to_wait_out_not_a_request_past_it(
        judge_double: JudgeDouble) -> None:
    spec = BudgetSpec(store="redis://127.0.0.1:1/0", limits={KEY: KeyLimit(concurrency=2)})  # nothing listens
    scorer = judge_scorer_from_config(judge_config(judge_double.api_base, 2), budget=KeyBudget(spec))

    with pytest.raises(JudgeError) as raised:
        await score(scorer, "here", 1)

    assert raised.value.outage == f"the shared judge budget of {KEY} could not be reached"  # the run parks
    assert judge_double.requests == []


async def test_a_run_that_stops_waiting_gives_up_its_place_in_the_queue_at_once(spec_for) -> None:
    waiting = asyncio.Event()
    # lease_s stays 30: a place left behind in the queue would hold the next run up that long
    budget = KeyBudget(spec_for(concurrency=1), on_wait=lambda *w: waiting.set())
    holder, quitter, later = (budget.limiter(KEY, own=ConcurrencyLimit(4)) for _ in range(3))
    held, done = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with holder:
            held.set()
            await done.wait()

    async def take(limiter: Any) -> bool:
        async with limiter:
            return True

    holding = asyncio.ensure_future(hold())
    await held.wait()
    quitting = asyncio.ensure_future(take(quitter))
    await waiting.wait()  # in the queue, first
    quitting.cancel()  # e.g. its group's sibling failed
    done.set()
    await holding

    assert await asyncio.wait_for(take(later), timeout=3)  # not after the quitter's 30 s lease
