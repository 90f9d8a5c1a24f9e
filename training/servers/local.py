"""Our own OpenAI-compatible inference server on transformers + peft, for CPU, development and tests: the engine
(`training.servers.engine`) behind HTTP.

It serves the same contract as `vllm serve --enable-lora` where the training loop depends on it:
  GET  /health, GET /v1/models
  POST /v1/chat/completions   (n, temperature, top_p, max_tokens, stop, seed, tools, logprobs, ignore_eos,
                               return_token_ids -> prompt_token_ids and per-choice token_ids)
  POST /v1/load_lora_adapter  {"lora_name", "lora_path"}   POST /v1/unload_lora_adapter {"lora_name"}

Run: python -m training.servers.local --model DIR [--served-model-name NAME] [--port 8000] [--max-lora-rank 8]
"""
from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from training.servers.engine import ApiError, Engine


class Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a loop that opens dozens of rollouts at once would see
    # connections reset. vLLM (uvicorn) accepts a backlog of 2048.
    request_queue_size = 2048
    daemon_threads = True


def make_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the engine logs what matters
            pass

        def _send(self, status: int, payload: Any) -> None:
            body = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if not isinstance(payload, str) else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
            self._send(status, {"error": {"message": message, "type": kind, "code": status}, "object": "error"})

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(200, "")
            elif self.path == "/v1/models":
                self._send(200, engine.models())
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ApiError(400, "the request body must be a JSON object")
                if self.path == "/v1/chat/completions":
                    self._send(200, engine.chat(body))
                elif self.path == "/v1/load_lora_adapter":
                    engine.call(engine.load_adapter, str(body.get("lora_name")), str(body.get("lora_path")))
                    self._send(200, f"Success: LoRA adapter '{body.get('lora_name')}' added successfully.")
                elif self.path == "/v1/unload_lora_adapter":
                    engine.call(engine.unload_adapter, str(body.get("lora_name")))
                    self._send(200, f"Success: LoRA adapter '{body.get('lora_name')}' removed successfully.")
                else:
                    raise ApiError(404, f"no route {self.path}")
            except ApiError as err:
                self._error(err.status, str(err))
            except json.JSONDecodeError as err:
                self._error(400, f"invalid JSON: {err}")
            except Exception as err:  # noqa: BLE001 - answer 500 with the cause instead of dropping the connection
                self._error(500, f"{type(err).__name__}: {err}")

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.servers.local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="directory (or hub id) of the base model")
    parser.add_argument("--served-model-name", default=None, help="name clients use for the base model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-lora-rank", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    engine = Engine(args.model, args.served_model_name or args.model, args.max_lora_rank, args.device)
    server = Server((args.host, args.port), make_handler(engine))
    print(f"serving {engine.served_name} on http://{args.host}:{server.server_port}/v1", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
