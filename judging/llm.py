"""The only module that talks to litellm (imported lazily: `import judging` stays cheap).

One request = one `call_judge`: transport failures (timeouts, connection errors, 429, 5xx) are retried here
with exponential backoff; anything else (bad key, unknown model, bad request) is a JudgeError at once,
because retrying cannot fix it.

Prompt caching: the request's first message (the system message) is the part that is the same for every call
of a run (judging/prompt.py). A model that litellm says supports prompt caching and that caches only where the
request marks it (Claude, Anthropic-style `cache_control`) gets that mark on the system message; others get
nothing extra (OpenAI, DeepSeek and xAI cache a long shared prefix by themselves). Each reply records the
prefix's tokens, the cached tokens the provider reported, and the price with and without the cache discount.
"""
from __future__ import annotations

import asyncio
import copy
import functools
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from judging.errors import JudgeError
from judging.failures import CAUSES, failure_cause, retryable
from judging.prompt import canonical

_litellm: Any = None


def _load_litellm() -> Any:
    global _litellm
    if _litellm is None:
        # Without this litellm fetches its price map from the internet at import time.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")  # likewise for Anthropic models
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
    prefix_tokens: int | None = None
    counted_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    uncached_cost_usd: float | None = None


def _retryable(litellm: Any, err: Exception) -> bool:
    return retryable(failure_cause(litellm, err))


def _retry_after(err: Exception) -> float:
    """The server's Retry-After (seconds form) when it sent one; 0 otherwise."""
    headers = getattr(err, "litellm_response_headers", None) or {}
    try:
        return max(0.0, float(headers.get("retry-after", 0)))
    except (TypeError, ValueError):  # the HTTP-date form: fall back to our own backoff
        return 0.0


def _failure(model: str, litellm: Any, err: Exception, retries: int) -> JudgeError:
    """The JudgeError for a request that failed: "judge MODEL: <cause>: <type>…; <advice>". The cause's words
    (judging.failures.CAUSES) are what the pages match on to explain it."""
    cause = failure_cause(litellm, err)
    said, advice = CAUSES[cause]
    tried = f" persisted after {retries} retries" if retryable(cause) else ""
    return JudgeError(f"{model}: {said}: {type(err).__name__}{tried} ({err}); {advice}")


def _cost(litellm: Any, response: Any) -> float | None:
    # litellm raises for models missing from its price map (e.g. a local "openai/judge"); that is an
    # unknown price, which we report as None — never as 0, which would read as "free".
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:
        return None
    return float(cost) if cost is not None else None


# Providers whose Claude models cache only up to a `cache_control` mark (litellm translates the mark for each).
_MARKED_CACHE_PROVIDERS = frozenset({"anthropic", "bedrock", "vertex_ai", "azure_ai"})


def needs_cache_mark(model: str) -> bool:
    """Whether requests to `model` should mark their constant prefix with `cache_control`: litellm knows the
    model supports prompt caching, and its provider caches only where marked. An unknown model gets no mark."""
    litellm = _load_litellm()
    try:
        provider = litellm.get_llm_provider(model=model)[1]
        supported = litellm.utils.supports_prompt_caching(model=model, custom_llm_provider=provider)
    except Exception:  # a model litellm cannot route or price: send the plain request
        return False
    return bool(supported) and provider in _MARKED_CACHE_PROVIDERS and "claude" in model.lower()


def with_cache_mark(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with the system message (the run-constant prefix) as one text block marked `cache_control`."""
    first = messages[0] if messages else {}
    if first.get("role") != "system" or not isinstance(first.get("content"), str):
        return messages
    block = {"type": "text", "text": first["content"], "cache_control": {"type": "ephemeral"}}
    return [{**first, "content": [block]}, *messages[1:]]


@functools.lru_cache(maxsize=256)
def _tokens(model: str, text: str) -> int:
    # The schema and the system message are the same on every call of a run: counted once.
    return int(_load_litellm().token_counter(model=model, text=text)) if text else 0


def count_prefix(model: str, messages: list[dict[str, Any]],
                 response_format: dict[str, Any] | type[BaseModel]) -> tuple[int | None, int | None]:
    """(prefix tokens, request tokens) counted locally with litellm's tokenizer for `model`: the reply schema and
    the system message, and the schema and every message. The same tokenizer on both sides, so their ratio is
    the request's cacheable share whatever the provider's per-message framing. (None, None) if it cannot count."""
    schema = canonical(response_format if isinstance(response_format, dict) else response_format.model_json_schema())
    system = messages[0] if messages and messages[0].get("role") == "system" else None
    rest = messages[1:] if system is not None else messages
    try:
        prefix = _tokens(model, schema) + (_tokens(model, str(system.get("content") or "")) if system else 0)
        total = prefix + sum(int(_load_litellm().token_counter(model=model, text=str(m.get("content") or "")))
                             for m in rest if m.get("content"))
    except Exception:  # a tokenizer that is not available offline: no count rather than a wrong one
        return None, None
    return prefix, total


def _cached_tokens(usage: Any) -> int | None:
    """Prompt tokens the provider served from its cache (litellm maps Anthropic's cache_read_input_tokens here
    too); None when the reply says nothing about caching."""
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    if cached is None:
        cached = getattr(usage, "cache_read_input_tokens", None)
    return int(cached) if cached is not None else None


def _cache_write_tokens(usage: Any) -> int | None:
    """Prompt tokens the provider wrote to its cache (Anthropic's cache_creation_input_tokens, billed above the
    plain input price); None when the reply says nothing about cache writes (OpenAI never does)."""
    written = getattr(usage, "cache_creation_input_tokens", None)
    return int(written) if written is not None else None


def _uncached_cost(litellm: Any, response: Any, cost: float | None) -> float | None:
    """What the reply would have cost with every prompt token at the full input price (no cache read discount,
    no cache write premium): litellm's price of the same reply with the cache details taken out."""
    usage = getattr(response, "usage", None)
    if cost is None or usage is None:
        return None
    plain = copy.copy(response)
    plain.usage = litellm.Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                                total_tokens=usage.total_tokens)
    return _cost(litellm, plain)


async def call_judge(*, model: str, messages: list[dict[str, Any]], response_format: dict[str, Any] | type[BaseModel],
                     params: dict[str, Any], transport_retries: int, backoff_s: float,
                     max_backoff_s: float) -> RawReply:
    litellm = _load_litellm()
    kwargs = {"timeout": 120.0, **params}
    # We own the retry loop (so retries are counted and bounded); the OpenAI client must not add its own.
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("num_retries", 0)
    prefix_tokens, counted_tokens = count_prefix(model, messages, response_format)
    if needs_cache_mark(model):
        messages = with_cache_mark(messages)
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
            raise _failure(f"judge {model}", litellm, err, retries) from err
        latency = time.perf_counter() - started
        usage = getattr(response, "usage", None)
        choice = response.choices[0] if response.choices else None
        content = choice.message.content if choice is not None else None
        cost = _cost(litellm, response)
        return RawReply(
            content=content,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cost_usd=cost,
            latency_s=latency,
            transport_retries=retries,
            prefix_tokens=prefix_tokens,
            counted_tokens=counted_tokens,
            cached_tokens=_cached_tokens(usage),
            cache_write_tokens=_cache_write_tokens(usage),
            uncached_cost_usd=_uncached_cost(litellm, response, cost),
        )


@dataclass
class ChatReply:
    """One chat completion of a model that is not judging (a distillation teacher, studio/teacher.py)."""

    message: dict[str, Any]  # {"role": "assistant", "content": str, "tool_calls"?: [...]} in OpenAI's form
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    latency_s: float
    transport_retries: int


async def call_chat(*, model: str, messages: list[dict[str, Any]], params: dict[str, Any],
                    tools: list[dict[str, Any]] | None = None, transport_retries: int = 3, backoff_s: float = 1.0,
                    max_backoff_s: float = 30.0) -> ChatReply:
    """A plain chat completion through litellm, with the judge's transport retries (timeouts, 429, 5xx) and its
    errors (JudgeError with advice): how a teacher configured like a judge is called."""
    litellm = _load_litellm()
    kwargs = {"timeout": 120.0, **params, "max_retries": 0, "num_retries": 0}
    if tools:
        kwargs["tools"] = tools
    retries = 0
    while True:
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(model=model, messages=messages, **kwargs)
        except Exception as err:
            if _retryable(litellm, err) and retries < transport_retries:
                delay = min(max_backoff_s, backoff_s * 2 ** retries) * (0.5 + random.random() / 2)
                retries += 1
                await asyncio.sleep(min(max_backoff_s, max(delay, _retry_after(err))))
                continue
            raise _failure(model, litellm, err, retries) from err
        choice = response.choices[0]
        message: dict[str, Any] = {"role": "assistant", "content": choice.message.content or ""}
        if getattr(choice.message, "tool_calls", None):
            message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in choice.message.tool_calls]
        usage = getattr(response, "usage", None)
        return ChatReply(message=message, finish_reason=choice.finish_reason or "stop",
                         prompt_tokens=getattr(usage, "prompt_tokens", None),
                         completion_tokens=getattr(usage, "completion_tokens", None), cost_usd=_cost(litellm, response),
                         latency_s=time.perf_counter() - started, transport_retries=retries)
