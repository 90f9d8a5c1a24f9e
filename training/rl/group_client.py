"""One request with `n` choices for a group's identical prompts, so a group reaches the server as one batch.

A group's trajectories start from the same conversation: their first turn (and any later turn whose
conversation is still identical) asks the same question G times. `GroupClient` wraps an AsyncOpenAI client for
one group's rollouts: chat-completion calls made in the same event-loop tick with identical arguments are sent as
one request with `n` = their count (vLLM's OpenAI API and the local server both sample `n` choices as one batch),
and each caller gets a response shaped as if it had asked alone: one choice, index 0, its own usage. Environments
keep calling `client.chat.completions.create` as before.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any


class GroupClient:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._pending: dict[str, list[asyncio.Future]] = {}
        self._kwargs: dict[str, dict[str, Any]] = {}
        self.chat = self  # so `client.chat.completions.create` reaches `create`
        self.completions = self
        self.requests = 0  # how many requests reached the server (the bench and tests read it)

    async def create(self, **kwargs: Any) -> Any:
        # Greedy requests stay single: vLLM refuses n > 1 with temperature 0.
        if kwargs.get("n", 1) != 1 or kwargs.get("stream") or kwargs.get("temperature") == 0:
            self.requests += 1
            return await self._client.chat.completions.create(**kwargs)
        key = json.dumps(kwargs, sort_keys=True, default=repr)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        if key not in self._pending:
            self._pending[key], self._kwargs[key] = [], kwargs
            # Runs after every rollout task that is ready in this tick has made its call.
            asyncio.get_running_loop().call_soon(self._flush, key)
        self._pending[key].append(future)
        return await future

    def _flush(self, key: str) -> None:
        waiters, kwargs = self._pending.pop(key), self._kwargs.pop(key)
        self.requests += 1
        task = asyncio.ensure_future(self._client.chat.completions.create(**{**kwargs, "n": len(waiters)}))
        task.add_done_callback(lambda done: self._hand_out(done, waiters))

    @staticmethod
    def _hand_out(done: asyncio.Future, waiters: list[asyncio.Future]) -> None:
        if done.cancelled() or done.exception() is not None:
            for w in waiters:
                if not w.done():
                    w.set_exception(done.exception() if not done.cancelled() else asyncio.CancelledError())
            return
        response = done.result()
        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != len(waiters):
            error = RuntimeError(f"asked the server for {len(waiters)} choices and got {len(choices)}")
            for w in waiters:
                if not w.done():
                    w.set_exception(error)
            return
        for w, choice in zip(waiters, choices):
            if w.done():  # its rollout was cancelled
                continue
            tokens = len((choice.model_extra or {}).get("token_ids") or []) or None
            usage = response.usage
            if usage is not None:
                completion = tokens if tokens is not None else usage.completion_tokens // len(waiters)
                usage = usage.model_copy(update={"completion_tokens": completion,
                                                 "total_tokens": usage.prompt_tokens + completion})
            w.set_result(response.model_copy(update={"choices": [choice.model_copy(update={"index": 0})],
                                                     "usage": usage}))
