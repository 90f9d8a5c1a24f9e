"""Checking a judge before a run depends on it: one tiny real request through the same path runs and the
playground use (judging.score_group → litellm), with no retries, so a judge that is down says why at once."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from webapp.models import JudgeConfig, Role
from webapp.services.access import require_role
from webapp.services.playground import judge_request_params

TEST_TIMEOUT_S = 20.0  # long enough for a slow hosted model's first token, short enough to wait for in a page
_GROUP = [[{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}],
          [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "5"}]]
_RUBRIC = "The correct answer is best."


def judge_config_test(*, user, judge: JudgeConfig) -> dict[str, Any]:
    """{"ok", "latency_s", "cost_usd", "prompt_tokens", "completion_tokens", "reply", "scores", "error"}.
    Never raises for a judge problem: the reason is the result."""
    import judging

    require_role(user=user, project=judge.project, role=Role.EDITOR)
    started = time.perf_counter()
    result: dict[str, Any] = {"ok": False, "model": judge.model, "cost_usd": None, "reply": "", "scores": []}
    try:
        params = {**judge_request_params(judge=judge), "timeout": TEST_TIMEOUT_S}
        judgement = asyncio.run(judging.score_group(
            _GROUP, judge.model, rubric=_RUBRIC, extra_litellm_params=params, cache=False, shuffle=False,
            transport_retries=0, max_attempts=1))
    except (judging.JudgeError, ValueError) as err:
        result.update(error=str(err), latency_s=time.perf_counter() - started)
        return result
    call = judgement.calls[-1]
    result.update(ok=True, latency_s=time.perf_counter() - started, cost_usd=judgement.cost_usd,
                  prompt_tokens=judgement.prompt_tokens, completion_tokens=judgement.completion_tokens,
                  reply=call.raw_reply or "", scores=[round(s.score, 3) for s in judgement.scores], error="")
    return result
