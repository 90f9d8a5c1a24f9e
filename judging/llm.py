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

from egress.failures import failure_detail
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
    (judging.failures.CAUSES) are what the pages match on to explain it. A reply's body is never quoted (a server
    may answer with anything, keys included): only its HTTP status (egress.failures.failure_detail)."""
    cause = failure_cause(litellm, err)
    said, advice = CAUSES[cause]
    tried = f" persisted after {retries} retries" if retryable(cause) else ""
    detail = failure_detail(err)
    return JudgeError(f"{model}: {said}: {type(err).__name__}{tried} ({detail}); {advice}",
                      outage=_outage(model, cause, detail))


def _outage(who: str, cause: str, detail: str) -> str | None:
    """"openai/gpt-4o answered 503" or "... could not be reached" for a failure worth waiting out; else None."""
    if not retryable(cause):
        return None
    provider = who.removeprefix("judge ")
    if detail.startswith("HTTP "):
        return f"{provider} answered {detail.removeprefix('HTTP ')}"
    return f"{provider} answered 429" if cause == "rate-limited" else f"{provider} could not be reached"


# litellm providers whose requests go through the OpenAI SDK client, which takes our pinned httpx client; the
# others go through litellm's own HTTP handler, which takes our pinned transport.
_OPENAI_SDK_PROVIDERS = frozenset({"openai", "custom_openai"})


async def _pinned_client(litellm: Any, model: str, kwargs: dict[str, Any]) -> Any:
    """A client for litellm's `client=` whose every request (redirects included) passes the egress policy and
    connects to the address it checked, when the request goes to an `api_base` someone gave; None otherwise (the
    provider's own address). Raises EgressRefused at once for an address the policy refuses."""
    api_base = kwargs.get("api_base")
    if not api_base:
        return None
    import egress

    # checked here too, so that a provider whose handler would not use the client is refused all the same (the
    # lookup blocks: off the event loop)
    try:
        await asyncio.get_running_loop().run_in_executor(None, egress.check_url, api_base)
    except egress.EgressUnresolvable:
        pass  # the connection fails as it would without the policy: the server could not be reached
    try:
        provider = litellm.get_llm_provider(model=model, api_base=api_base)[1]
    except Exception:  # litellm's own error follows from acompletion
        provider = ""
    if provider in _OPENAI_SDK_PROVIDERS:
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=api_base, api_key=kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY"),
                           http_client=egress.async_client(follow_redirects=True), max_retries=0)
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    return AsyncHTTPHandler(transport=egress.PinnedAsyncTransport())


async def _close(client: Any) -> None:
    if client is not None:
        await client.close()


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


async def _completion(litellm: Any, who: str, request: dict[str, Any], *, transport_retries: int, backoff_s: float,
                      max_backoff_s: float) -> tuple[Any, float, int]:
    """(response, latency of the answered attempt, retries): transport failures retried with jittered
    exponential backoff (at least the server's Retry-After), anything else a JudgeError at once."""
    retries = 0
    while True:
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(**request)
        except Exception as err:  # litellm maps every provider error onto its own exception types
            if _retryable(litellm, err) and retries < transport_retries:
                # jitter so that many groups throttled together do not retry in lockstep
                delay = min(max_backoff_s, backoff_s * 2 ** retries) * (0.5 + random.random() / 2)
                retries += 1
                await asyncio.sleep(min(max_backoff_s, max(delay, _retry_after(err))))
                continue
            raise _failure(who, litellm, err, retries) from err
        return response, time.perf_counter() - started, retries


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
    try:
        client = await _pinned_client(litellm, model, kwargs)
    except Exception as err:  # an address the egress policy refuses: nothing was sent
        raise _failure(f"judge {model}", litellm, err, 0) from err
    try:
        response, latency, retries = await _completion(
            litellm, f"judge {model}", {"model": model, "messages": messages, "response_format": response_format,
                                        **kwargs, **({"client": client} if client is not None else {})},
            transport_retries=transport_retries, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
    finally:
        await _close(client)
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
    try:
        client = await _pinned_client(litellm, model, kwargs)
    except Exception as err:  # an address the egress policy refuses: nothing was sent
        raise _failure(model, litellm, err, 0) from err
    try:
        response, latency, retries = await _completion(
            litellm, model, {"model": model, "messages": messages, **kwargs,
                             **({"client": client} if client is not None else {})},
            transport_retries=transport_retries, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
    finally:
        await _close(client)
    choice = response.choices[0]
    message: dict[str, Any] = {"role": "assistant", "content": choice.message.content or ""}
    if getattr(choice.message, "tool_calls", None):
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name, "arguments": c.function.arguments}} for c in choice.message.tool_calls]
    usage = getattr(response, "usage", None)
    return ChatReply(message=message, finish_reason=choice.finish_reason or "stop",
                     prompt_tokens=getattr(usage, "prompt_tokens", None),
                     completion_tokens=getattr(usage, "completion_tokens", None), cost_usd=_cost(litellm, response),
                     latency_s=latency, transport_retries=retries)
