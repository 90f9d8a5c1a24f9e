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

from training.servers.engine import Engine
from training.servers.local import Server, make_handler

LOG = os.environ["VLLM_DOUBLE_LOG"]


def record(**event: Any) -> None:
    with open(LOG, "a") as f:
        f.write(json.dumps({"time": time.time(), **event}) + "\n")


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
    state = {"asleep": False}
    base = make_handler(engine)

    class Handler(base):  # type: ignore[valid-type, misc]
        def do_GET(self) -> None:  # noqa: N802
            if sleep_endpoints and self.path == "/is_sleeping":
                self._send(200, {"is_sleeping": state["asleep"]})
            else:
                super().do_GET()

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if sleep_endpoints and path in ("/sleep", "/wake_up"):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                record(event=path.strip("/"), query=self.path.partition("?")[2])
                wake = os.environ.get("VLLM_DOUBLE_WAKE", "")
                if path == "/wake_up" and wake == "refuse":
                    self._error(500, "CUDA out of memory while restoring the KV cache")
                    return
                state["asleep"] = path == "/sleep" or wake == "stays_asleep"
                self._send(200, "")
                return
            if state["asleep"]:
                record(event="refused_while_asleep", path=path)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._error(500, f"{path} while the engine is asleep")
                return
            if path == "/v1/load_lora_adapter":
                record(event="load_lora_adapter")
            super().do_POST()

    server = Server((args.host, args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
