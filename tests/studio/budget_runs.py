"""A run's judge scorer in a process of its own, for the shared key budget's tests (tests/studio/test_key_budget.py).

    STUDIO_JUDGE_BUDGET=<spec JSON> JUDGE_TEST_API_KEY=test \
        python -m tests.studio.budget_runs API_BASE TAG GROUPS CONCURRENCY

builds the scorer as a run's engine does (webapp/execution/engine_child.py: the budget from the environment),
scores GROUPS groups whose prompts carry TAG, and prints "scored N". `python -m tests.studio.budget_runs hold
API_BASE` holds one of KEY's slots in a request that is never answered.
"""
from __future__ import annotations

import asyncio
import sys
from typing import Any

from training.types import Scenario, Trajectory, TrajectoryGroup

KEY = "JUDGE_TEST_API_KEY"


def group(tag: str, index: int) -> TrajectoryGroup:
    scenario = Scenario(id=f"{tag}-{index}", user_message=f"question {index} of {tag}")
    return TrajectoryGroup(scenario=scenario, trajectories=[
        Trajectory(scenario_id=scenario.id, messages=[
            {"role": "user", "content": scenario.user_message},
            {"role": "assistant", "content": f"answer {tag}/{index} quality {q}"}]) for q in (0.2, 0.8)])


def judge_config(api_base: str, concurrency: int) -> dict[str, Any]:
    return {"judge_model": "openai/judge", "api_base": api_base, "api_key_env": KEY, "concurrency": concurrency,
            "cache": False, "transport_retries": 0, "backoff_s": 0.0}


async def score(scorer: Any, tag: str, groups: int) -> int:
    results = await asyncio.gather(*(scorer(group(tag, i)) for i in range(groups)))
    return len(results)


async def hold(api_base: str) -> None:
    """Takes a slot of KEY's budget and sends one request through it that the double never answers (the test
    kills this process meanwhile). A plain HTTP request rather than a scorer's: no litellm to import first."""
    import urllib.request

    from judging import ConcurrencyLimit
    from studio.key_budget import budget_from_env

    budget = budget_from_env()
    assert budget is not None
    request = urllib.request.Request(f"{api_base}/chat/completions", data=b'{"messages": [{"role": "user", '
                                     b'"content": "answer child/0"}]}', headers={"Content-Type": "application/json"})
    async with budget.limiter(KEY, own=ConcurrencyLimit(1)):
        await asyncio.to_thread(urllib.request.urlopen, request, timeout=60)


def main() -> None:
    from studio.key_budget import budget_from_env
    from studio.scoring import judge_scorer_from_config

    if sys.argv[1] == "hold":
        asyncio.run(hold(sys.argv[2]))
        return
    api_base, tag, groups, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    scorer = judge_scorer_from_config(judge_config(api_base, concurrency), budget=budget_from_env())
    print(f"scored {asyncio.run(score(scorer, tag, groups))}", flush=True)


if __name__ == "__main__":
    main()
