"""The deployment's shared judge key budgets (STUDIO_JUDGE_KEY_LIMITS; studio/key_budget), as the web app hands
them out: to a run's engine in its environment (runner.py), and to the re-scorings this process runs itself
(the playground), so both count against the same budget.

The counts live in Redis when the deployment has one (STUDIO_JUDGE_BUDGET_REDIS_URL, default REDIS_URL): runs
on several machines share it. On the embedded default they live in file locks under the var dir, which every
process of the one machine sees. Only the engine of a run whose key has a limit is given the Redis address.
"""
from __future__ import annotations

import functools
from pathlib import Path

from django.conf import settings

from studio.key_budget import BUDGET_ENV, BudgetSpec, KeyBudget, KeyLimit


def _spec(limits: dict[str, KeyLimit]) -> BudgetSpec:
    store = settings.STUDIO_JUDGE_BUDGET_REDIS_URL or str(Path(settings.VAR_DIR) / "judge-budget")
    return BudgetSpec(store=store, prefix=settings.STUDIO_JUDGE_BUDGET_PREFIX, limits=limits)


def judge_budget_env(*, api_key_env: str | None) -> dict[str, str]:
    """What a run's engine is given when its judge's key has a shared budget: {BUDGET_ENV: the spec}, else {}."""
    limit = settings.STUDIO_JUDGE_KEY_LIMITS.get(api_key_env or "")
    if limit is None:
        return {}
    return {BUDGET_ENV: _spec({api_key_env: limit}).model_dump_json()}


@functools.cache
def _process_budget(spec_json: str) -> KeyBudget:
    return KeyBudget(BudgetSpec.model_validate_json(spec_json))


def judge_key_budget() -> KeyBudget | None:
    """This process's budget for the scorers it builds (one store connection per process), or None when the
    deployment limits no key."""
    if not settings.STUDIO_JUDGE_KEY_LIMITS:
        return None
    return _process_budget(_spec(dict(settings.STUDIO_JUDGE_KEY_LIMITS)).model_dump_json())
