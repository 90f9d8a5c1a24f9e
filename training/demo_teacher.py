"""The SFT demo's scripted teacher: an OpenAI-compatible HTTP server (stdlib, a thread) that plays 2048 by the
game's rules. It reads the board from the conversation's last user message and answers a legal move in the
demo's format, the move that merges the most with probability `greedy`, else a random legal one, so n answers
to one game differ and the filter has something to choose from. No model: it stands for "a strong teacher".

    with Teacher2048(greedy=0.7, seed=0) as teacher:
        client = openai.AsyncOpenAI(base_url=teacher.base_url, api_key="demo")
"""
from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from training.environments import game_2048_rules as rules


def parse_board(text: str) -> rules.Board | None:
    """The last board in a message as render() writes it ('.' for empty), or None."""
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if cells and all(c == "." or c.isdigit() for c in cells):
            rows.append([0 if c == "." else int(c) for c in cells])
        elif rows:
            rows = []  # a board is the last run of such lines
    return rows if rows and all(len(r) == len(rows) for r in rows) else None


def choose_move(board: rules.Board, rng: random.Random, greedy: float) -> str | None:
    legal = rules.legal_moves(board)
    if not legal:
        return None
    if rng.random() < greedy:
        # Most points merged, then the most empty cells left: a simple, strong 2048 heuristic.
        return max(legal, key=lambda m: (rules.slide(board, m)[1], sum(v == 0 for row in rules.slide(board, m)[0]
                                                                        for v in row), -legal.index(m)))
    return rng.choice(legal)


class Teacher2048:
    def __init__(self, *, greedy: float = 0.7, seed: int = 0) -> None:
        self.greedy = greedy
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.requests = 0
        self._server: ThreadingHTTPServer | None = None

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        text = str(messages[-1].get("content") or "") if messages else ""
        board = parse_board(text)
        choices = []
        for i in range(int(body.get("n") or 1)):
            with self.lock:
                self.requests += 1
                move = choose_move(board, self.rng, self.greedy) if board else None
            content = f"<move>{move}</move>" if move else "I cannot move."
            choices.append({"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": content}})
        return {"id": f"teacher-{self.requests}", "object": "chat.completion", "created": 0,
                "model": body.get("model", "teacher"), "choices": choices,
                "usage": {"prompt_tokens": 0, "completion_tokens": 4 * len(choices), "total_tokens": 4 * len(choices)}}

    def start(self) -> "Teacher2048":
        teacher = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                data = json.dumps(teacher.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                         name="teacher-2048").start()
        return self

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() the teacher first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "Teacher2048":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
