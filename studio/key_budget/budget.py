"""KeyBudget: the shared budgets of a deployment's judge keys, and the limiter each scorer gets from them."""
from __future__ import annotations

import os
from typing import Any, Mapping

from pydantic import ValidationError

from judging import JudgeError
from studio.key_budget.limiter import SharedLimiter, WaitReport
from studio.key_budget.limits import BUDGET_ENV, BudgetSpec

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class KeyBudget:
    """Built once per process; `limiter(key, own=...)` for each scorer. The store is opened on first use."""

    def __init__(self, spec: BudgetSpec, *, on_wait: WaitReport | None = None) -> None:
        self.spec = spec
        self.on_wait = on_wait
        self._store: Any = None

    @property
    def uses_redis(self) -> bool:
        return self.spec.store.startswith(_REDIS_SCHEMES)

    def _opened(self) -> Any:
        if self._store is None:
            if self.uses_redis:
                from studio.key_budget.redis_store import RedisStore

                self._store = RedisStore(self.spec.store, prefix=self.spec.prefix)
            else:
                from studio.key_budget.file_store import FileStore

                self._store = FileStore(self.spec.store)
        return self._store

    def limiter(self, key: str | None, *, own: Any) -> Any:
        """The limiter for requests sent with key variable `key`: `own` (the run's own limit) within the key's
        shared budget, or `own` alone when the key has none."""
        limit = self.spec.limits.get(key or "")
        if key is None or limit is None:
            return own
        return SharedLimiter(key=key, limit=limit, store=self._opened(), own=own, on_wait=self.on_wait,
                             blocking=self.uses_redis)


def budget_from_env(environ: Mapping[str, str] = os.environ, *,
                    on_wait: WaitReport | None = None) -> KeyBudget | None:
    """The budget the web app gave this engine in BUDGET_ENV, or None (no shared limit for its key)."""
    text = environ.get(BUDGET_ENV)
    if not text:
        return None
    try:
        return KeyBudget(BudgetSpec.model_validate_json(text), on_wait=on_wait)
    except ValidationError as err:
        raise JudgeError(f"{BUDGET_ENV} is not a judge budget: {err.errors()[0]['msg']}") from None
