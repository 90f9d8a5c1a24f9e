"""What a failed outbound call may say of itself: the HTTP status of the reply and a named cause, never the reply's
body (a server at a project's address may answer with anything, credentials included: an address that reached a
cloud metadata endpoint would otherwise show its keys on a page). Duck-typed on the HTTP libraries' exceptions,
so this package imports none of them but httpx."""
from __future__ import annotations

import re

import httpx

from egress.policy import EgressRefused

# Exceptions of these packages may quote a reply's body in their message; ours never do.
_CLIENT_PACKAGES = frozenset({"httpx", "httpx2", "httpcore", "openai", "litellm", "anthropic", "aiohttp", "mcp"})
_SPACES = re.compile(r"\s+")


def failure_chain(err: BaseException) -> list[BaseException]:
    """`err` and the exceptions behind it (__cause__, else __context__), outermost first."""
    seen, chain = set(), []
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def egress_refusal(err: BaseException) -> EgressRefused | None:
    """The policy's refusal behind `err` (the pinned transports raise it inside the HTTP clients, which wrap it
    as a connection error), or None."""
    return next((link for link in failure_chain(err) if isinstance(link, EgressRefused)), None)


def _reply_status(link: BaseException) -> int | None:
    response = getattr(link, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(link, httpx.HTTPStatusError) or (
            isinstance(status, int) and type(link).__module__.split(".")[0] in ("openai", "anthropic", "httpx2")
            and getattr(link, "status_code", None) == status):
        return status
    return None


def failure_detail(err: BaseException) -> str:
    """The egress refusal's reason; else, for an exception of an HTTP client library, the reply's HTTP status
    (or the transport error where no reply came, e.g. a refused connection); else `err`'s own message."""
    if (refused := egress_refusal(err)) is not None:
        return str(refused)
    if type(err).__module__.split(".")[0] not in _CLIENT_PACKAGES:
        return str(err)
    transport = None
    for link in failure_chain(err):
        if (status := _reply_status(link)) is not None:
            return f"HTTP {status}"
        if transport is None and isinstance(link, (httpx.TransportError, OSError, TimeoutError)):
            transport = link
    if transport is not None:
        return f"{type(transport).__name__}: {_SPACES.sub(' ', str(transport))[:200]}".rstrip(": ")
    # e.g. litellm's own error for a reply that is no chat completion (an HTTP 200 from a metadata endpoint):
    # the status is litellm's, and its message lists the reply's keys
    status = getattr(err, "status_code", None)
    said = f"{type(err).__name__} with status {status}" if isinstance(status, int) else type(err).__name__
    return f"{said} from the client library; its message, which may quote the reply, is not shown"
