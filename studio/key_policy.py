"""Which judge API key variables may be sent to which endpoints: an administrator's policy, checked by the web
app when a judge is saved and again by the engine before a key leaves the worker (defense in depth).

The policy is JSON, e.g. {"OPENAI_API_KEY": ["https://api.openai.com/v1"], "GROQ_API_KEY": [""]}: each key
variable with the api_base values it may be sent to; "" is the model provider's default endpoint (no
api_base). The web app passes it to the engine in STUDIO_JUDGE_KEY_ENDPOINTS.
"""
from __future__ import annotations

import json

POLICY_ENV = "STUDIO_JUDGE_KEY_ENDPOINTS"
# The run's own stored key, put into the engine's environment by the worker: an editor gave it, so it may go
# wherever that judge points.
STORED_KEY_ENV = "STUDIO_JUDGE_API_KEY"

KeyPolicy = dict[str, tuple[str, ...]]


def normalise_base(api_base: str | None) -> str:
    return (api_base or "").strip().rstrip("/")


def parse_key_policy(text: str) -> KeyPolicy:
    """Raises ValueError naming what is wrong with `text`."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{POLICY_ENV} is not JSON: {err}") from None
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(b, str) for b in v) for k, v in raw.items()):
        raise ValueError(f'{POLICY_ENV} must map key variables to lists of endpoints, e.g. '
                         '{"OPENAI_API_KEY": ["https://api.openai.com/v1"]}')
    return {key: tuple(normalise_base(b) for b in bases) for key, bases in raw.items()}


def key_policy_refusal(policy: KeyPolicy, *, api_key_env: str | None, api_base: str | None) -> str | None:
    """Why `api_key_env` may not be sent to `api_base` under `policy`, or None when it may."""
    if not api_key_env or api_key_env == STORED_KEY_ENV:
        return None
    if api_key_env not in policy:
        allowed = ", ".join(sorted(policy)) or "none are configured"
        return (f"the key variable {api_key_env} is not one an administrator allowed for judges "
                f"({allowed}; see {POLICY_ENV})")
    base = normalise_base(api_base)
    if base not in policy[api_key_env]:
        where = ", ".join(b or "the provider's default endpoint" for b in policy[api_key_env])
        return (f"{api_key_env} may only be sent to {where}, not to "
                f"{base or 'the provider default endpoint'}")
    return None
