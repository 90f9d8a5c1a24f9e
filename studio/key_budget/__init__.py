"""Judge keys shared by several runs share one budget (issue 49): at most `concurrency` requests in flight and
`per_minute` request starts per minute for each key variable, all runs and re-scorings together, so runs on one
provider key slow down together instead of failing each other with 429s.

Cross-process by construction, since each run's engine is its own process: the counts live in Redis (leases
that expire when a holder dies) or, on one machine without Redis, in file locks under the var dir. Imports
judging (its JudgeError) and nothing of the web app; the web app builds the spec from its settings.
"""
from __future__ import annotations

from studio.key_budget.budget import KeyBudget, budget_from_env
from studio.key_budget.limiter import SharedLimiter, WaitReport
from studio.key_budget.limits import BUDGET_ENV, LIMITS_ENV, BudgetSpec, KeyLimit, parse_key_limits

__all__ = ["BUDGET_ENV", "LIMITS_ENV", "BudgetSpec", "KeyBudget", "KeyLimit", "SharedLimiter", "WaitReport",
           "budget_from_env", "parse_key_limits"]
