"""Our own OpenAI-compatible inference server on transformers + peft, for CPU, development and tests: the engine
(`training.servers.engine`) behind HTTP (uvicorn and an ASGI app; how it listens: `training.servers.serving`).

It serves the same contract as `vllm serve --enable-lora` where the training loop depends on it:
  GET  /health, GET /v1/models
  POST /v1/chat/completions   (n, temperature, top_p, max_tokens, stop, seed, tools, logprobs, ignore_eos,
                               return_token_ids -> prompt_token_ids and per-choice token_ids; stream and
                               stream_options.include_usage: server-sent chunks as vLLM's, training.servers.streaming)
  POST /v1/load_lora_adapter  {"lora_name", "lora_path"}   POST /v1/unload_lora_adapter {"lora_name"}
Errors are JSON objects `{"error": {"message", "type", "param", "code"}, "object": "error"}`.

Run: python -m training.servers.local --model DIR [--served-model-name NAME] [--port 8000] [--max-lora-rank 8]
It listens on 127.0.0.1; another --host needs $STUDIO_INFERENCE_TOKEN, which every request must then carry as
`Authorization: Bearer <token>`. The limits (timeouts, body size, connections, n) are flags: see --help.
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from training.model.chat_templates import FAMILIES
from training.servers.chat_request import MAX_N
from training.servers.engine import ApiError, Engine
from training.servers.serving import Limits, bind_refusal, inference_token, serve
from training.servers.streaming import chat_stream

ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 408: "RequestTimeout",
               413: "RequestEntityTooLarge", 503: "ServiceUnavailable"}
Handler = Callable[[Request], Awaitable[Response]]


class HttpError(Exception):
    """An answer from the HTTP layer. With `close` (the default: the body was not read whole) the connection
    closes after it, so whatever the client still sends is never read."""

    def __init__(self, status: int, message: str, *, close: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


def json_response(status: int, payload: Any, *, close: bool = False) -> Response:
    # json.dumps as it is (not starlette's JSONResponse, which refuses a -inf log-prob instead of writing it).
    headers = {"Connection": "close"} if close else None
    if isinstance(payload, str):
        return Response(payload, status, headers, media_type="text/plain")
    return Response(json.dumps(payload), status, headers, media_type="application/json")


def error_response(status: int, message: str, param: str | None = None, *, close: bool = False) -> Response:
    error = {"message": message, "type": ERROR_TYPES.get(status, "InternalServerError"), "param": param,
             "code": status}
    return json_response(status, {"error": error, "object": "error"}, close=close)


async def read_json(request: Request, limits: Limits) -> dict[str, Any]:
    """The body as a JSON object, read against the body limits: refused by its declared length before a byte is
    read, or as soon as it passes the limit while streaming in."""
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise HttpError(400, f"Content-Length {declared!r} is not a number")
    if declared is not None and int(declared) > limits.max_body_bytes:
        raise HttpError(413, f"the request body is {declared} bytes; this server takes at most "
                             f"{limits.max_body_bytes}")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise HttpError(413, f"the request body passed {limits.max_body_bytes} bytes, the most this "
                                    "server takes")
                chunks.append(chunk)
    except TimeoutError:
        raise HttpError(408, f"the request body was not received within {limits.body_timeout_s:g} s") from None
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except ValueError as err:
        raise HttpError(400, f"invalid JSON: {err}", close=False) from None
    if not isinstance(body, dict):
        raise HttpError(400, "the request body must be a JSON object", close=False)
    return body


def _name(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"`{field}` must be a non-empty string", field)
    return value


class LocalApp:
    """The ASGI app: the token check, the body limits and the routes over one engine."""

    def __init__(self, engine: Engine, *, token: str | None = None, limits: Limits | None = None) -> None:
        self.engine = engine
        self.token = token.encode() if token else None
        self.limits = limits or Limits()
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): self.health, ("GET", "/v1/models"): self.models,
            ("POST", "/v1/chat/completions"): self.chat, ("POST", "/v1/load_lora_adapter"): self.load_adapter,
            ("POST", "/v1/unload_lora_adapter"): self.unload_adapter,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # uvicorn runs without lifespan and websockets: nothing else arrives
            response = await self.respond(Request(scope, receive))
            await response(scope, receive, send)

    async def respond(self, request: Request) -> Response:
        try:
            if not self.authorized(request):
                raise HttpError(401, "this inference server needs `Authorization: Bearer <token>` "
                                     "($STUDIO_INFERENCE_TOKEN of its deployment)")
            handler = self.routes.get((request.method, request.url.path))
            if handler is None:
                raise HttpError(404, f"no route {request.method} {request.url.path}")
            return await handler(request)
        except HttpError as err:
            return error_response(err.status, str(err), close=err.close)
        except ApiError as err:
            return error_response(err.status, str(err), err.param)
        except ClientDisconnect:
            return error_response(400, "the client went away", close=True)
        except Exception as err:  # noqa: BLE001 - answer 500 with the cause instead of dropping the connection
            return error_response(500, f"{type(err).__name__}: {err}")

    def authorized(self, request: Request) -> bool:
        if self.token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token)

    async def health(self, request: Request) -> Response:
        return json_response(200, "")

    async def models(self, request: Request) -> Response:
        return json_response(200, self.engine.models())

    async def chat(self, request: Request) -> Response:
        body = await read_json(request, self.limits)
        if body.get("stream"):  # validated and queued first: a wrong request is a 400, not a broken stream
            return StreamingResponse(chat_stream(self.engine, body), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return json_response(200, await self.engine.chat_async(body))

    async def load_adapter(self, request: Request) -> Response:
        body = await read_json(request, self.limits)
        name, path = _name(body, "lora_name"), _name(body, "lora_path")
        await asyncio.wrap_future(self.engine.submit(self.engine.load_adapter, name, path))
        return json_response(200, f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_adapter(self, request: Request) -> Response:
        name = _name(await read_json(request, self.limits), "lora_name")
        await asyncio.wrap_future(self.engine.submit(self.engine.unload_adapter, name))
        return json_response(200, f"Success: LoRA adapter '{name}' removed successfully.")


def main(argv: list[str] | None = None) -> None:
    defaults = Limits()
    parser = argparse.ArgumentParser(prog="python -m training.servers.local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="directory (or hub id) of the base model")
    parser.add_argument("--served-model-name", default=None, help="name clients use for the base model")
    parser.add_argument("--host", default="127.0.0.1", help="another than loopback needs $STUDIO_INFERENCE_TOKEN")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-lora-rank", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--max-n", type=int, default=MAX_N, help="most choices per request (n)")
    parser.add_argument("--chat-family", default=None, choices=sorted(FAMILIES),
                        help="the model's chat family (default: from its chat template; training/model/chat_templates)")
    parser.add_argument("--reasoning", default="keep", choices=["keep", "drop"],
                        help="reasoning models (Qwen3): keep thinking, or drop it (non-thinking mode)")
    for field, info in Limits.model_fields.items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(info.default), default=info.default,
                            help=f"{info.description} Default {getattr(defaults, field)}.")
    args = parser.parse_args(argv)
    token = inference_token()
    if refusal := bind_refusal(args.host, token):  # before the model loads: a wrong deployment fails at once
        parser.exit(2, f"{parser.prog}: {refusal}\n")
    limits = Limits(**{field: getattr(args, field) for field in Limits.model_fields})
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    engine = Engine(args.model, args.served_model_name or args.model, args.max_lora_rank, args.device,
                    max_n=args.max_n, chat_family=args.chat_family, reasoning=args.reasoning)
    print(f"serving {engine.served_name} on http://{args.host}:{args.port}/v1"
          f"{' (token required)' if token else ''}", file=sys.stderr, flush=True)
    serve(LocalApp(engine, token=token, limits=limits), args.host, args.port, limits)


if __name__ == "__main__":
    main()
