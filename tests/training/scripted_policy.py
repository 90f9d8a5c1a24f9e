"""A scripted agent behind the OpenAI chat-completions HTTP boundary, for environment tests without a model.

`scripted_client(replies)` is an AsyncOpenAI client whose transport answers each request with the next reply:
a string (a plain answer), a list of (tool name, arguments) pairs (tool calls), or a callable that returns
either, called when that request arrives. A request for `n` choices takes the next `n` replies. Every request's
messages and
tools are kept in `client.requests` so tests can read what the agent was shown.
"""
from __future__ import annotations

import json
from typing import Any

import httpx
from openai import AsyncOpenAI

MODEL = "scripted"


def scripted_client(replies: list[Any]) -> AsyncOpenAI:
    replies = list(replies)
    requests: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        ids = list(range(1, 4))
        choices = []
        for index in range(int(body.get("n") or 1)):
            reply = replies.pop(0) if replies else "I give up."
            if callable(reply):  # something that happens at this point of the conversation (e.g. a server dies)
                reply = reply()
            message: dict[str, Any] = {"role": "assistant", "content": reply if isinstance(reply, str) else ""}
            if not isinstance(reply, str):
                message["tool_calls"] = [
                    {"id": f"call_{len(requests)}_{i}", "type": "function",
                     "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                    for i, (name, args) in enumerate(reply)]
            choices.append({"index": index, "message": message, "token_ids": ids,
                            "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                            "logprobs": {"content": [{"token": "t", "logprob": -0.5, "top_logprobs": []}
                                                     for _ in ids]}})
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices,
            "usage": {"prompt_tokens": 1, "completion_tokens": len(ids) * len(choices),
                      "total_tokens": 1 + len(ids) * len(choices)}})

    client = AsyncOpenAI(base_url="http://policy.invalid/v1", api_key="unused",
                         http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)))
    client.requests = requests  # type: ignore[attr-defined]
    return client
