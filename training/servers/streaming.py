"""`stream: true` chat completions of the local server (`training.servers.local`), sent as vLLM sends them.

The request is validated and queued exactly as without streaming (a wrong parameter is a JSON 400 before a byte of
the stream); then each choice's tokens are decoded as the engine samples them and sent as server-sent events of
`chat.completion.chunk` objects: a first chunk per choice with `delta: {"role": "assistant", "content": ""}`, one
chunk per sampled token that adds text (`delta: {"content": ...}`), and a last chunk per choice with its
`finish_reason` (its `logprobs` and, asked for with `return_token_ids`, its `token_ids` ride on that last chunk);
`stream_options.include_usage` adds a chunk with `choices: []` and the usage; then `data: [DONE]`. The deltas of a
choice add up to the text the same request answers without streaming. A request with `stop` strings or `tools`
sends its text in the last chunk: a stop string or a tool call found at the end changes what came before.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from training.servers.chat_request import ChatParams
from training.servers.engine import Engine, Job

UNFINISHED = "\ufffd"  # how a character whose bytes are not all sampled yet decodes: held back until they are


def chat_stream(engine: Engine, body: dict[str, Any]) -> AsyncIterator[bytes]:
    """Queues the request (its ApiError raised here, before anything is sent) and returns its events."""
    loop = asyncio.get_running_loop()
    arrivals: asyncio.Queue[tuple[int, int | None]] = asyncio.Queue()

    def on_token(index: int) -> Callable[[int], None]:
        return lambda token: loop.call_soon_threadsafe(arrivals.put_nowait, (index, token))

    params, prompt_ids, jobs = engine._prepare(body, on_token=on_token)
    for i, job in enumerate(jobs):  # after its tokens: the worker hands both to the loop in that order
        job.future.add_done_callback(lambda _, i=i: loop.call_soon_threadsafe(arrivals.put_nowait, (i, None)))
    return _events(engine, params, prompt_ids, jobs, arrivals)


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _events(engine: Engine, params: ChatParams, prompt_ids: list[int], jobs: list[Job],
                  arrivals: asyncio.Queue[tuple[int, int | None]]) -> AsyncIterator[bytes]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": params.model}

    def chunk(index: int, delta: dict[str, Any], **fields: Any) -> bytes:
        return _sse({**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None,
                                          **fields}]})

    stops = [params.stop] if isinstance(params.stop, str) else params.stop or []
    at_end = bool(stops or params.tools)
    ids: list[list[int]] = [[] for _ in jobs]
    sent = [""] * len(jobs)
    for i in range(len(jobs)):
        first = {**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                      "finish_reason": None}]}
        if i == 0 and params.return_token_ids:
            first["prompt_token_ids"] = prompt_ids
        yield _sse(first)
    left, completion_tokens = len(jobs), 0
    while left:
        i, token = await arrivals.get()
        if token is not None:
            ids[i].append(token)
            if not at_end:
                text = engine.tokenizer.decode(ids[i], skip_special_tokens=True)
                if len(text) > len(sent[i]) and text.startswith(sent[i]) and not text.endswith(UNFINISHED):
                    yield chunk(i, {"content": text[len(sent[i]):]})
                    sent[i] = text
            continue
        left -= 1
        error = jobs[i].future.exception()
        if error is not None:  # the status line is sent: the error goes in the stream, as vLLM sends it
            yield _sse({"error": {"message": f"{type(error).__name__}: {error}", "type": "InternalServerError",
                                  "param": None, "code": 500}, "object": "error"})
            break
        choice = engine._choice(i, jobs[i].future.result(), stops, params.tools, bool(params.logprobs))
        message, delta = choice["message"], {}
        content = message.get("content") or ""
        if len(content) > len(sent[i]) and content.startswith(sent[i]):
            delta["content"] = content[len(sent[i]):]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
        extra = {"token_ids": choice["token_ids"]} if params.return_token_ids else {}
        completion_tokens += len(choice["token_ids"])
        yield chunk(i, delta, logprobs=choice["logprobs"], finish_reason=choice["finish_reason"], **extra)
    else:
        if (params.stream_options or {}).get("include_usage"):
            yield _sse({**base, "choices": [], "usage": {
                "prompt_tokens": len(prompt_ids), "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens}})
    yield b"data: [DONE]\n\n"
