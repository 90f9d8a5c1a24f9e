"""Checking a judge before a run depends on it: one tiny real request through the same path runs and the
playground use (judging.score_group → litellm), with no retries, so a judge that is down says why at once."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ValidationError

from webapp.egress_policy import egress_refusal
from webapp.models import JudgeConfig, Role
from webapp.services.access import require_role
from webapp.services.playground import judge_request_params

TEST_TIMEOUT_S = 20.0  # long enough for a slow hosted model's first token, short enough to wait for in a page
_GROUP = [[{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}],
          [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "5"}]]
_RUBRIC = "The correct answer is best."
RECENT_ANSWER_S = 600  # a launch within this long of a successful test (or launch check) does not test again


def _answered_key(judge: JudgeConfig, params: dict[str, Any]) -> str:
    """Changes when anything a request depends on changes (model, URL, key), so an edited judge is tested anew."""
    digest = hashlib.sha256(json.dumps([judge.model, params], sort_keys=True, default=str).encode()).hexdigest()
    return f"judge-answered:{judge.pk}:{digest[:32]}"


def judge_config_test(*, user, judge: JudgeConfig) -> dict[str, Any]:
    """{"ok", "latency_s", "cost_usd", "prompt_tokens", "completion_tokens", "reply", "scores", "error"}.
    Never raises for a judge problem: the reason is the result."""
    import judging

    require_role(user=user, project=judge.project, role=Role.EDITOR)
    started = time.perf_counter()
    result: dict[str, Any] = {"ok": False, "model": judge.model, "cost_usd": None, "reply": "", "scores": []}
    if refusal := egress_refusal(judge.api_base):  # nothing is sent to an address the policy refuses
        result.update(error=f"judge {judge.model}: {refusal}", latency_s=time.perf_counter() - started)
        return result
    try:
        base = judge_request_params(judge=judge)
        params = {**base, "timeout": TEST_TIMEOUT_S}
        judgement = asyncio.run(judging.score_group(
            _GROUP, judge.model, rubric=_RUBRIC, extra_litellm_params=params, cache=False, shuffle=False,
            transport_retries=0, max_attempts=1))
    except (judging.JudgeError, ValueError) as err:
        result.update(error=str(err), latency_s=time.perf_counter() - started)
        return result
    cache.set(_answered_key(judge, base), time.time(), RECENT_ANSWER_S)
    call = judgement.calls[-1]
    result.update(ok=True, latency_s=time.perf_counter() - started, cost_usd=judgement.cost_usd,
                  prompt_tokens=judgement.prompt_tokens, completion_tokens=judgement.completion_tokens,
                  reply=call.raw_reply or "", scores=[round(s.score, 3) for s in judgement.scores], error="")
    return result


def judge_config_reachable_check(*, user, judge: JudgeConfig) -> None:
    """Before a run queues on this judge: it answered a test in the last few minutes, or it answers one now.
    Raises ValidationError beside the judge field, so nothing is queued to fail at its first step. A key that
    only the workers hold cannot be tried from here; the worker checks it when the run starts."""
    from webapp.user_errors import user_error

    if judge.api_key_env and not os.environ.get(judge.api_key_env):
        return
    from judging.errors import JudgeError

    try:
        params = judge_request_params(judge=judge)
    except (JudgeError, ValueError) as err:
        raise ValidationError({"judge_config": [str(err)]}) from None
    if cache.get(_answered_key(judge, params)):
        return
    result = judge_config_test(user=user, judge=judge)
    if not result["ok"]:
        why = user_error(result["error"])
        raise ValidationError({"judge_config": [
            f"The judge did not answer a test request, so the run was not queued. {why.what} {why.todo}".strip()]})


def judge_readiness(*, judge: JudgeConfig) -> int:
    """How ready `judge` is to answer from this process, for choosing a default: 2 it answered a test (or a
    launch check) in the last few minutes, 1 its key is at hand (stored, or its key variable is set here, or it
    names no key variable), 0 its key variable is not set here or its parameters are refused."""
    from judging.errors import JudgeError

    if judge.api_key_env and not os.environ.get(judge.api_key_env):
        return 0
    try:
        params = judge_request_params(judge=judge)
    except (JudgeError, ValueError):
        return 0
    return 2 if cache.get(_answered_key(judge, params)) else 1


def judge_pick_working(*, judges: list[JudgeConfig]) -> JudgeConfig | None:
    """The judge to preselect where a page asks for one: the readiest (judge_readiness), in the given order
    among equals; None when there is none."""
    return max(judges, key=lambda j: judge_readiness(judge=j), default=None)
