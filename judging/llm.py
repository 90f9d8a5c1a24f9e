"""The only module that talks to litellm (imported lazily: `import judging` stays cheap).

One request = one `call_judge`: transport failures (timeouts, connection errors, 429, 5xx) are retried here
with exponential backoff; anything else (bad key, unknown model, bad request) is a JudgeError at once,
because retrying cannot fix it.
"""
from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from judging.errors import JudgeError

_litellm: Any = None


def _load_litellm() -> Any:
    global _litellm
    if _litellm is None:
        # Without this litellm fetches its price map from the internet at import time.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True  # its "Give Feedback" banner on every exception is noise in logs
        _litellm = litellm
    return _litellm


@dataclass
class RawReply:
    content: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    latency_s: float
    transport_retries: int


def _retryable(litellm: Any, err: Exception) -> bool:
    status = getattr(err, "status_code", None)
    if isinstance(err, (litellm.Timeout, litellm.APIConnectionError, litellm.RateLimitError,
                        litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)):
        return True
    return isinstance(status, int) and (status == 429 or status >= 500)


def _retry_after(err: Exception) -> float:
    """The server's Retry-After (seconds form) when it sent one; 0 otherwise."""
    headers = getattr(err, "litellm_response_headers", None) or {}
    try:
        return max(0.0, float(headers.get("retry-after", 0)))
    except (TypeError, ValueError):  # the HTTP-date form: fall back to our own backoff
        return 0.0


def _advice(litellm: Any, err: Exception) -> str:
    if isinstance(err, litellm.AuthenticationError):
        return "the judge API rejected the credentials: check the API key (or the env var that holds it)"
    if isinstance(err, litellm.NotFoundError):
        return "the judge API does not know this model or URL: check the model string and api_base"
    if isinstance(err, litellm.BadRequestError):
        return ("the judge API rejected the request: check the model string, the params, and whether this "
                "model supports structured output (response_format)")
    return "see the error above"


def _cost(litellm: Any, response: Any) -> float | None:
    # litellm raises for models missing from its price map (e.g. a local "openai/judge"); that is an
    # unknown price, which we report as None — never as 0, which would read as "free".
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:
        return None
    return float(cost) if cost is not None else None


async def call_judge(*, model: str, messages: list[dict[str, Any]], response_format: dict[str, Any] | type[BaseModel],
                     params: dict[str, Any], transport_retries: int, backoff_s: float,
                     max_backoff_s: float) -> RawReply:
    litellm = _load_litellm()
    kwargs = {"timeout": 120.0, **params}
    # We own the retry loop (so retries are counted and bounded); the OpenAI client must not add its own.
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("num_retries", 0)
    retries = 0
    while True:
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(model=model, messages=messages, response_format=response_format,
                                                 **kwargs)
        except Exception as err:  # litellm maps every provider error onto its own exception types
            if _retryable(litellm, err) and retries < transport_retries:
                # jitter so that many groups throttled together do not retry in lockstep
                delay = min(max_backoff_s, backoff_s * 2 ** retries) * (0.5 + random.random() / 2)
                delay = min(max_backoff_s, max(delay, _retry_after(err)))
                retries += 1
                await asyncio.sleep(delay)
                continue
            what = type(err).__name__
            if _retryable(litellm, err):
                raise JudgeError(f"judge {model}: {what} persisted after {retries} retries ({err}); the judge "
                                 "API is down or rate-limiting: retry later or lower the concurrency") from err
            raise JudgeError(f"judge {model}: {what}: {err} — {_advice(litellm, err)}") from err
        latency = time.perf_counter() - started
        usage = getattr(response, "usage", None)
        choice = response.choices[0] if response.choices else None
        content = choice.message.content if choice is not None else None
        return RawReply(
            content=content,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cost_usd=_cost(litellm, response),
            latency_s=latency,
            transport_retries=retries,
        )
