"""The parameters of a chat completion request that the local engine reads, validated before anything is queued.

A request with a parameter out of range or of the wrong type is answered 400 with a message that names it, as
vLLM's OpenAI server answers: `n` from 1 to the server's maximum, `max_tokens` at least 1 (and, once the prompt is
rendered, no more than the context has left), `temperature` and `top_p` finite and in range. Parameters the
engine does not use are ignored, as vLLM ignores them (OpenAI clients and agent frameworks send `user`,
`tool_choice`, `parallel_tool_calls` and the like); the run's endpoint in the web app is where an allow-list
refuses them.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_N = 256  # the largest group a run config allows (GRPOConfig.group_size)


class ChatParams(BaseModel):
    # extra="ignore", not "forbid": see the module's docstring. Numbers are parsed as pydantic's lax mode parses
    # them (vLLM's request model is pydantic too, so "2" and 2.0 are an `n` of 2 on both).
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: Any = None  # checked against the served names by the engine (404, as vLLM)
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    n: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)  # vLLM's default max_logprobs
    ignore_eos: bool | None = None
    return_token_ids: bool | None = None
    stream: bool | None = None  # answered by the HTTP server only (training.servers.streaming)
    stream_options: dict[str, Any] | None = None


class RequestError(ValueError):
    """A request the engine refuses, with the parameter it names (OpenAI's `param`)."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.param = param


def chat_params(body: dict[str, Any], max_n: int = MAX_N) -> ChatParams:
    """The request's parameters, or RequestError naming the first one that is wrong."""
    try:
        params = ChatParams.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        got = "" if first["type"] == "missing" else f" (got {_short(first.get('input'))})"
        raise RequestError(f"`{param}`: {message}{got}.", param) from None
    if params.n is not None and params.n > max_n:
        raise RequestError(f"`n`: at most {max_n} choices per request on this server (got {params.n}).", "n")
    return params


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
