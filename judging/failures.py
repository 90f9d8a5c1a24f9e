"""Why a request to the judge's API failed, named once: the judge's errors, the launch check, Test judge and the
pages all tell a missing key from a refused one, an unknown model from a server that cannot be reached, and a
rate limit from a server error, because the advice differs. litellm maps providers' errors onto its exception
types, but not always onto the cause (OpenAI's client with no key raises "Missing credentials", which litellm
reports as an InternalServerError; a refused connection is one too), so the message and the HTTP status are
read as well.
"""
from __future__ import annotations

import re
from typing import Any

from egress.failures import egress_refusal

# cause → (the words an error message carries, the advice for whoever configures the judge)
CAUSES: dict[str, tuple[str, str]] = {
    "no-key": ("no API key was sent",
               "set the judge's API key (or the environment variable that holds it)"),
    "key-refused": ("the API refused the key",
                    "check the judge's API key (or the environment variable that holds it)"),
    "unknown-model": ("the API does not know this model or address",
                      "check the model string (provider/model) and the api_base"),
    "unreachable": ("the server could not be reached",
                    "check that the server is up and the api_base is right"),
    "rate-limited": ("the API is rate-limiting",
                     "retry later or lower the judge's concurrency"),
    "server-error": ("the server failed with an error of its own",
                     "retry later; if the server is yours, read its logs"),
    "bad-request": ("the API rejected the request",
                    "check the model string, the params, and whether this model supports structured output "
                    "(response_format)"),
    "address-refused": ("the address is not allowed by this deployment's egress policy",
                        "use a public address, or ask an administrator to list this host in "
                        "STUDIO_EGRESS_ALLOWED_HOSTS (link-local and metadata addresses are never allowed)"),
    "other": ("the request failed", "see the error above"),
}

_NO_KEY = re.compile(r"Missing credentials|api_key client option must be set|Missing \w+ API Key|no key is set|"
                     r"API key not (?:found|provided)", re.I)
_NOT_CONNECTED = re.compile(r"Connection error|Connection refused|Name or service not known|"
                            r"nodename nor servname|getaddrinfo|Cannot connect|Failed to establish", re.I)
_UNKNOWN_MODEL = re.compile(r"LLM Provider NOT provided|model .{0,80}does not exist|Unknown model|"
                            r"model_not_found|No such model", re.I)


def failure_cause(litellm: Any, err: BaseException) -> str:
    """One key of CAUSES for an exception litellm raised (`litellm`: the module, passed in so that only
    judging/llm.py imports it)."""
    text = str(err)
    status = getattr(err, "status_code", None)
    if egress_refusal(err) is not None:
        return "address-refused"
    if _NO_KEY.search(text):
        return "no-key"
    if isinstance(err, litellm.AuthenticationError) or status in (401, 403) or \
            isinstance(err, getattr(litellm, "PermissionDeniedError", ())):
        return "key-refused"
    if isinstance(err, litellm.NotFoundError) or status == 404 or _UNKNOWN_MODEL.search(text):
        return "unknown-model"
    if isinstance(err, litellm.RateLimitError) or status == 429:
        return "rate-limited"
    if isinstance(err, (litellm.Timeout, litellm.APIConnectionError)) or _NOT_CONNECTED.search(text):
        return "unreachable"
    if isinstance(err, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)) \
            or isinstance(status, int) and status >= 500:
        return "server-error"
    if isinstance(err, litellm.BadRequestError) or status in (400, 422):
        return "bad-request"
    return "other"


def retryable(cause: str) -> bool:
    """Worth asking again after a pause: the server may come back or the limit lift; a key or a model won't."""
    return cause in ("unreachable", "rate-limited", "server-error")
