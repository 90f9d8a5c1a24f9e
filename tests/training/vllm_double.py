"""A double of vLLM's OpenAI server at its HTTP boundary, for tests of the sleep-mode plan on a machine without vLLM.

Started in place of `python -m vllm.entrypoints.openai.api_server ...` (tests write a fake interpreter that runs
this file). Generation and adapters are our local server's; on top it serves vLLM's sleep-mode endpoints
(POST /sleep?level=N, POST /wake_up, GET /is_sleeping), exactly when vLLM would: with --enable-sleep-mode and
VLLM_SERVER_DEV_MODE=1. While asleep it refuses generation and adapter loads, as a vLLM without its weights and KV
cache cannot serve. It appends one JSON line per event to $VLLM_DOUBLE_LOG: its command line and environment
first, then every sleep, wake_up and load_lora_adapter with the wall time. VLLM_DOUBLE_WAKE=refuse answers
/wake_up with 500; VLLM_DOUBLE_WAKE=stays_asleep answers 200 but stays asleep.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from training.servers.engine import Engine
from training.servers.local import LocalApp, error_response, json_response
from training.servers.serving import Limits, serve

LOG = os.environ["VLLM_DOUBLE_LOG"]


def record(**event: Any) -> None:
    with open(LOG, "a") as f:
        f.write(json.dumps({"time": time.time(), **event}) + "\n")


class DoubleApp(LocalApp):
    """The local server's app plus vLLM's sleep-mode endpoints (not under /v1: vLLM's API key does not cover them)."""

    def __init__(self, engine: Engine, sleep_endpoints: bool) -> None:
        super().__init__(engine, token=os.environ.get("VLLM_API_KEY"), limits=Limits())
        self.sleep_endpoints = sleep_endpoints
        self.asleep = False

    async def respond(self, request: Request) -> Response:
        path = request.url.path
        if self.sleep_endpoints and request.method == "GET" and path == "/is_sleeping":
            return json_response(200, {"is_sleeping": self.asleep})
        if self.sleep_endpoints and request.method == "POST" and path in ("/sleep", "/wake_up"):
            record(event=path.strip("/"), query=request.url.query)
            wake = os.environ.get("VLLM_DOUBLE_WAKE", "")
            if path == "/wake_up" and wake == "refuse":
                return error_response(500, "CUDA out of memory while restoring the KV cache")
            self.asleep = path == "/sleep" or wake == "stays_asleep"
            return json_response(200, "")
        if request.method == "POST" and self.asleep and self.authorized(request):
            record(event="refused_while_asleep", path=path)
            return error_response(500, f"{path} while the engine is asleep")
        if request.method == "POST" and path == "/v1/load_lora_adapter":
            record(event="load_lora_adapter")
        return await super().respond(request)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-lora-rank", type=int, default=8)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    args, _ = parser.parse_known_args()
    record(event="start", argv=sys.argv[1:], env={k: os.environ.get(k) for k in (
        "VLLM_SERVER_DEV_MODE", "CUDA_VISIBLE_DEVICES", "VLLM_ALLOW_RUNTIME_LORA_UPDATING")})
    sleep_endpoints = args.enable_sleep_mode and os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
    engine = Engine(args.model, args.served_model_name, args.max_lora_rank, "cpu")
    serve(DoubleApp(engine, sleep_endpoints), args.host, args.port, Limits())


if __name__ == "__main__":
    main()
