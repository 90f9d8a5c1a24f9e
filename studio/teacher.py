"""A distillation teacher configured like a judge: any litellm model, behind the OpenAI client's
`chat.completions.create`, so the engine's environments roll it out as they roll out the student
(training/sft/distill.py).

Each request goes through judging's one litellm module (judging.llm.call_chat: retries, errors with advice).
The teacher counts what it is sent and what it costs; with a budget it refuses to start a request once the
budget is spent (TeacherBudgetSpent), so a distillation stops at its cap rather than past it. A request for
`n` choices is sent as n requests (not every provider samples several choices).
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any


class TeacherBudgetSpent(RuntimeError):
    pass


class TeacherClient:
    def __init__(self, *, model: str, params: dict[str, Any], budget_usd: float | None = None,
                 concurrency: int = 4) -> None:
        self.model, self.params, self.budget_usd = model, dict(params), budget_usd
        self.chat = self  # `client.chat.completions.create` reaches `create`
        self.completions = self
        self._gate = asyncio.Semaphore(concurrency)
        self._lock = threading.Lock()
        self.requests = self.prompt_tokens = self.completion_tokens = self.unpriced = 0
        self.cost_usd = 0.0

    @property
    def spent(self) -> bool:
        return self.budget_usd is not None and self.cost_usd >= self.budget_usd

    def usage(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd,
                "unpriced_requests": self.unpriced}

    async def _one(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   params: dict[str, Any]) -> Any:
        from judging.llm import call_chat

        async with self._gate:
            if self.spent:
                raise TeacherBudgetSpent(f"the teacher's budget of ${self.budget_usd} is spent")
            reply = await call_chat(model=self.model, messages=messages, params=params, tools=tools)
        with self._lock:
            self.requests += 1
            self.prompt_tokens += reply.prompt_tokens or 0
            self.completion_tokens += reply.completion_tokens or 0
            if reply.cost_usd is None:
                self.unpriced += 1  # an unknown price is counted as such, never as free
            else:
                self.cost_usd += reply.cost_usd
        return reply

    async def create(self, *, model: str, messages: list[dict[str, Any]], n: int = 1,
                     tools: list[dict[str, Any]] | None = None, temperature: float | None = None,
                     top_p: float | None = None, max_tokens: int | None = None, **_server_only: Any) -> Any:
        """An OpenAI ChatCompletion answered by the teacher, named `model` as the caller asked (the engine checks
        the name its server answers with; here the teacher is the server). Token ids and log-probs, which only
        our inference servers return, are not asked for."""
        from openai.types.chat import ChatCompletion

        params = {**self.params, **{k: v for k, v in (("temperature", temperature), ("top_p", top_p),
                                                      ("max_tokens", max_tokens)) if v is not None}}
        replies = await asyncio.gather(*(self._one(messages, tools, params) for _ in range(max(1, n))))
        return ChatCompletion.model_validate({
            "id": "teacher", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": i, "message": r.message, "finish_reason": _finish(r.finish_reason)}
                        for i, r in enumerate(replies)],
            "usage": {"prompt_tokens": sum(r.prompt_tokens or 0 for r in replies),
                      "completion_tokens": sum(r.completion_tokens or 0 for r in replies),
                      "total_tokens": sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in replies)}})


def _finish(reason: str) -> str:
    return reason if reason in ("stop", "length", "tool_calls", "content_filter", "function_call") else "stop"


class ServedTeacher:
    """A checkpoint of the project as the teacher: the project's inference server (an OpenAI-compatible client,
    `inner`) answers under the checkpoint's served name. It counts requests and tokens as TeacherClient does; a
    self-hosted model has no price, so its cost is reported as such (`self_hosted`), never as $0 of an API."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chat = self
        self.completions = self
        self.requests = self.prompt_tokens = self.completion_tokens = 0
        self.spent = False  # no budget: the deployment's own server

    def usage(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": 0.0, "unpriced_requests": 0,
                "self_hosted": True}

    async def create(self, **kwargs: Any) -> Any:
        response = await self.inner.chat.completions.create(**kwargs)
        self.requests += 1
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.prompt_tokens += usage.prompt_tokens or 0
            self.completion_tokens += usage.completion_tokens or 0
        return response
