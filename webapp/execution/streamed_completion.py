"""A streamed chat completion put back together (Try it's child, try_child.py): no Django.

The chunks of a `stream: true` answer (vLLM's, or the local server's, training.servers.streaming) are added as
they arrive; `message()` is the assistant message so far and `completion()` the `ChatCompletion` the same
request answers without streaming, which is what an environment is handed: content, tool calls, finish reason,
log-probs and token ids (per chunk in vLLM, on the last chunk in the local server: both add up the same way),
usage and the model that answered.
"""
from __future__ import annotations

from typing import Any


def assistant_message(response: Any) -> dict[str, Any]:
    """The first choice of a ChatCompletion as the assistant message that goes into the conversation."""
    choice = response.choices[0]
    message: dict[str, Any] = {"role": "assistant", "content": choice.message.content or ""}
    if choice.message.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name, "arguments": c.function.arguments}} for c in choice.message.tool_calls]
    return message


class StreamedCompletion:
    """The first choice of a streamed answer, chunk by chunk."""

    def __init__(self) -> None:
        self.id, self.created, self.model = "", 0, ""
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}  # tool calls by their index, arguments as they add up
        self.finish_reason: str | None = None
        self.logprobs: list[Any] = []
        self.token_ids: list[int] = []
        self.prompt_token_ids: list[int] | None = None
        self.usage: Any = None

    def add(self, chunk: Any) -> bool:
        """Takes one chunk; whether it added text or a tool call to the message."""
        self.id, self.created = chunk.id or self.id, chunk.created or self.created
        self.model = chunk.model or self.model
        extra = chunk.model_extra or {}
        if extra.get("prompt_token_ids") is not None:
            self.prompt_token_ids = list(extra["prompt_token_ids"])
        if chunk.usage is not None:
            self.usage = chunk.usage
        grew = False
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self.content += delta.content
                grew = True
            for call in delta.tool_calls or []:
                known = self.calls.setdefault(call.index, {"id": "", "type": "function",
                                                           "function": {"name": "", "arguments": ""}})
                known["id"] = call.id or known["id"]
                if call.function is not None:
                    known["function"]["name"] += call.function.name or ""
                    known["function"]["arguments"] += call.function.arguments or ""
                grew = True
            if choice.logprobs is not None and choice.logprobs.content:
                self.logprobs += [lp.model_dump() for lp in choice.logprobs.content]
            self.token_ids += list((choice.model_extra or {}).get("token_ids") or [])
            self.finish_reason = choice.finish_reason or self.finish_reason
        return grew

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def completion(self) -> Any:
        from openai.types.chat import ChatCompletion

        message = self.message()
        choice: dict[str, Any] = {"index": 0, "message": {**message, "content": self.content or None},
                                  "finish_reason": self.finish_reason or "stop",
                                  "logprobs": {"content": self.logprobs} if self.logprobs else None}
        if self.token_ids:
            choice["token_ids"] = self.token_ids
        body: dict[str, Any] = {"id": self.id, "object": "chat.completion", "created": self.created,
                                "model": self.model, "choices": [choice],
                                "usage": self.usage.model_dump() if self.usage is not None else None}
        if self.prompt_token_ids is not None:
            body["prompt_token_ids"] = self.prompt_token_ids
        return ChatCompletion.model_validate(body)
