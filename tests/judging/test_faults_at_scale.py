"""Judge faults at scale: over a 20-step run's worth of groups, 30 % of judge calls (seeded) answer 5xx, 429 with
Retry-After, too late (timeout), truncated JSON, wrong ids or out-of-range scores. Every group ends scored
correctly or as a named JudgeError, nothing is dropped, and the accounting adds up: every reply the judge sent
(and the client received) is one recorded call, with its tokens."""
from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

import judging
from tests.judge_double import HttpError, JudgeDouble, RecordedRequest
from tests.judging.groups import quality_rule, trajectory

STEPS, GROUPS, SIZE, FAULT_RATE = 20, 4, 4, 0.3
FAULTS = ("500", "503", "429", "timeout", "truncated", "wrong_ids", "out_of_range")
TIMEOUT_S = 0.5


class ChaosJudge:
    """A responder: the right scores (read from the prompt), or one of FAULTS on FAULT_RATE of calls."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.outcomes: Counter[str] = Counter()

    def __call__(self, request: RecordedRequest):
        with self.lock:
            fault = self.random.choice(FAULTS) if self.random.random() < FAULT_RATE else "ok"
            self.outcomes[fault] += 1
        good = JudgeDouble.score_by(quality_rule)(request)
        if fault in ("500", "503"):
            return HttpError(int(fault))
        if fault == "429":
            return HttpError(429, message="slow down", retry_after=0.05)
        if fault == "timeout":
            time.sleep(TIMEOUT_S * 3)  # the client has given up by now; this reply is never read
            return good
        if fault == "truncated":
            text = json.dumps(good)
            return text[: len(text) // 2]
        if fault == "wrong_ids":
            good["scores"][0]["trajectory_id"] = "not-an-id"
            return good
        if fault == "out_of_range":
            good["scores"][-1]["score"] = 1.7
            return good
        return good


async def test_a_20_step_run_under_30_percent_judge_faults_scores_or_names_every_group(judge_double):
    chaos = ChaosJudge(seed=13)
    judge_double.responder = chaos
    results, expected = [], []
    for step in range(STEPS):
        groups = []
        for g in range(GROUPS):
            qualities = [round(0.1 + 0.2 * i + 0.01 * g, 2) for i in range(SIZE)]
            groups.append([trajectory(q, tag=f"s{step}g{g}") for q in qualities])
            expected.append(qualities)
        results += await judging.score_groups(
            groups, judge_double.model, concurrency=4, return_exceptions=True, backoff_s=0.0,
            extra_litellm_params={**judge_double.litellm_params, "timeout": TIMEOUT_S})

    assert len(results) == STEPS * GROUPS  # no group dropped
    failed = [r for r in results if isinstance(r, judging.JudgeError)]
    for result, qualities in zip(results, expected):
        if isinstance(result, judging.JudgeError):
            assert str(result).strip()  # a named, explained error
            continue
        assert [s.score for s in result.scores] == qualities  # mapped by id, never shifted or clamped
    # Accounting: every reply the client read is one recorded call (failed groups keep theirs), with its tokens.
    calls = [c for r in results for c in (r.calls if not isinstance(r, judging.JudgeError) else r.calls)]
    read_replies = sum(n for fault, n in chaos.outcomes.items() if fault in ("ok", "truncated", "wrong_ids",
                                                                              "out_of_range"))
    assert len(calls) == read_replies
    assert sum(c.prompt_tokens for c in calls) == read_replies * judge_double.usage[0]
    faults = sum(n for fault, n in chaos.outcomes.items() if fault != "ok")
    total = sum(chaos.outcomes.values())
    print(f"\njudge faults at scale: {total} judge requests, {faults} faults ({faults / total:.0%}: "
          f"{dict(sorted(chaos.outcomes.items()))}); {len(results) - len(failed)} of {len(results)} groups scored, "
          f"{len(failed)} named errors, {len(calls)} calls accounted")
    assert 0.2 < faults / total < 0.4 and len(failed) < len(results) // 4
