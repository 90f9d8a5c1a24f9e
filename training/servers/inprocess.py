"""The local server's engine run inside the training process: the same contract, handed off without HTTP.

`server.kind: inprocess` runs `training.servers.engine.Engine` (the same batching, sampling, chat template,
versioned adapters and in-place adapter refill) on a worker thread of the engine's own process. Requests go
straight from an OpenAI-shaped client object to `Engine.chat` and come back as the same `ChatCompletion`
objects the HTTP path returns (token ids and all in `model_extra`); errors are the same `openai` exceptions
(404 for an unknown or unloaded model, 400 for a bad request). What is saved: the JSON encoding and decoding of
every request and response, an HTTP round trip per request, and a second process competing for the CPU. The HTTP
`local` server stays for running the server on its own, and vLLM or an external URL for everything else.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletion

from training.servers.engine import ApiError, Engine
from training.types import TrainingError

BASE_URL = "inprocess://local/v1"  # not dialled: it names the server in messages and logs
# A request reaches the engine's queue within microseconds here (milliseconds over HTTP), so requests made
# together are all queued well within 2 ms: a shorter quiet gap closes each batch sooner at no loss.
BATCH_GAP_S = 0.002


def _openai_error(err: ApiError) -> openai.APIStatusError:
    """The exception an OpenAI client raises for the same HTTP answer, so callers handle both paths alike."""
    kind = {400: openai.BadRequestError, 404: openai.NotFoundError}.get(err.status, openai.InternalServerError)
    body = {"error": {"message": str(err), "type": kind.__name__, "param": err.param, "code": err.status},
            "object": "error"}
    response = httpx.Response(err.status, json=body, request=httpx.Request("POST", f"{BASE_URL}/chat/completions"))
    return kind(str(err), response=response, body=body["error"])


def _body(kwargs: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in kwargs.items() if k not in ("extra_body", "extra_headers", "extra_query", "timeout")
            and v is not None}
    body.update(kwargs.get("extra_body") or {})
    if body.get("stream"):
        raise openai.BadRequestError("stream is not supported in process", response=httpx.Response(
            400, request=httpx.Request("POST", BASE_URL)), body=None)
    return body


class _Completions:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def create(self, **kwargs: Any) -> ChatCompletion:
        try:
            return ChatCompletion.model_validate(self._engine.chat(_body(kwargs)))
        except ApiError as err:
            raise _openai_error(err) from None


class _AsyncCompletions(_Completions):
    async def create(self, **kwargs: Any) -> ChatCompletion:  # type: ignore[override]
        # Engine.chat waits for its batch on the engine's worker thread; this thread only waits.
        return await asyncio.to_thread(super().create, **kwargs)


class InProcessClient:
    """`client.chat.completions.create(...)` as on `openai.OpenAI` (or `AsyncOpenAI` with `asynchronous`)."""

    def __init__(self, engine: Engine, *, asynchronous: bool = False) -> None:
        self.completions = (_AsyncCompletions if asynchronous else _Completions)(engine)
        self.chat = self

    def close(self) -> None:
        pass

    def __enter__(self) -> "InProcessClient":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class EngineExecutor(Executor):
    """Runs callables on the engine's worker thread, between its batches (`loop.run_in_executor` takes it)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:  # type: ignore[override]
        return self._engine.submit(functools.partial(fn, *args, **kwargs))


class InProcessServer:
    """The `InferenceServer` interface (models, load/unload adapter, clients, stop) over an in-process Engine."""

    def __init__(self, base_model: str, served_name: str, max_lora_rank: int, device: str,
                 chat_family: str | None = None, reasoning: str = "keep") -> None:
        self.engine = Engine(base_model, served_name, max_lora_rank, device, batch_gap_s=BATCH_GAP_S,
                             chat_family=chat_family, reasoning=reasoning)
        self.base_url = BASE_URL
        self.model_name = served_name
        self.process = None
        self.log_path = None
        self.sleeps_during_training = False  # vLLM's sleep mode only; this engine shares its process, not a GPU
        # The trainer's calls run on the engine's thread too: one thread, one OpenMP team for every forward and
        # backward pass. Two threads taking turns measured 1.3-1.5x slower training steps at 2 torch threads.
        self.executor = EngineExecutor(self.engine)

    def models(self) -> list[str]:
        return [m["id"] for m in self.engine.models()["data"]]

    def load_adapter(self, name: str, path: str | Path) -> None:
        try:
            self.engine.call(self.engine.load_adapter, name, str(Path(path).resolve()))
        except ApiError as err:
            raise TrainingError(f"the inference server refused adapter {name!r} from {path}: {err}") from None

    def unload_adapter(self, name: str) -> None:
        try:
            self.engine.call(self.engine.unload_adapter, name)
        except ApiError as err:
            raise TrainingError(f"the inference server could not unload adapter {name!r}: {err}") from None

    def client(self) -> InProcessClient:
        return InProcessClient(self.engine)

    def async_client(self) -> InProcessClient:
        return InProcessClient(self.engine, asynchronous=True)

    def stop(self) -> None:
        self.engine.stop()

    def __enter__(self) -> "InProcessServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
