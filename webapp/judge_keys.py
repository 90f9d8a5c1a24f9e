"""Which of the workers' key variables a judge may name, decided in one place (issue 43; docs/security.md "Judge
keys"): the judge form offers exactly these, saving a judge accepts exactly these, and Test judge, Try it,
the playground, distillation and launch read the key under the same rule.

The policy is the administrators' STUDIO_JUDGE_KEY_ENDPOINTS with the demo's JUDGE_API_KEY_ENV bound to its
JUDGE_API_BASE (settings.py), less any variable whose name does not end in `_API_KEY` (a judge may never name
DATABASE_URL or SECRET_KEY, whatever the policy lists). The scorer in a web or judge process must not re-read the
raw variable (which lacks the demo's key), so the key is read here and handed to it; the engine child gets this
same policy in its environment (webapp/execution/runner.py).
"""
from __future__ import annotations

import os
import re

from django.conf import settings

from studio.key_policy import STORED_KEY_ENV, KeyPolicy, key_policy_refusal

# A free name would let an editor send any of the server's own variables (SECRET_KEY, DATABASE_URL) to an
# api_base of their choosing: a judge's key variable must look like one.
API_KEY_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*_API_KEY$")


def judge_key_policy() -> KeyPolicy:
    """The key variables a judge may name, each with the endpoints it may be sent to."""
    return {name: bases for name, bases in settings.STUDIO_JUDGE_KEY_ENDPOINTS.items()
            if API_KEY_ENV_NAME.match(name)}


def judge_key_refusal(*, api_key_env: str | None, api_base: str | None) -> str | None:
    """Why a judge may not send `api_key_env` to `api_base`, or None when it may (or names no variable)."""
    if not api_key_env or api_key_env == STORED_KEY_ENV:
        return None
    if not API_KEY_ENV_NAME.match(api_key_env):
        return "must name an environment variable ending in _API_KEY, e.g. OPENAI_API_KEY"
    return key_policy_refusal(judge_key_policy(), api_key_env=api_key_env, api_base=api_base)


def judge_key_value(*, api_key_env: str, api_base: str | None) -> str:
    """The key a judge names, read from this process's environment under the policy; ValueError naming the
    variable when it is refused or not set here."""
    if refusal := judge_key_refusal(api_key_env=api_key_env, api_base=api_base):
        raise ValueError(f"judge.api_key_env: {refusal}")
    key = os.environ.get(api_key_env)
    if not key:
        raise ValueError(f"judge.api_key_env names {api_key_env!r}, but that environment variable is not set")
    return key
