"""An HTTP double of the Studio API as an external-rollouts client sees it (the client's outside boundary): a
real HTTP server in a thread serving `GET /api/runs/<id>/rollouts/`, `POST .../rollouts/groups/` and the
run's OpenAI-compatible `POST .../openai/v1/chat/completions`, recording every request with its headers.

    with StudioDouble(steps=2, groups=2, group_size=3) as studio:
        studio.url, studio.token                  # what StudioClient takes
        studio.statuses = ["queued", "paused"]    # the statuses the next GETs answer before the run proceeds
        studio.errors.append((409, {"detail": "step 1 is closed"}))   # the next submission's answer
        studio.completions                        # recorded chat completion requests (headers, body)
        studio.submissions                        # accepted group bodies

A run of `steps` steps: a step is open until every group is submitted, then the next opens (after
`between_polls` GETs showing no step, as while the engine trains); after the last the run is completed.
A completion echoes the last message; with `tool_calls=True`, a user message sent with tools is answered by a
call of the first tool with `{"expression": "6 * 7"}`.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RUN_ID = 7


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any


class StudioDouble:
    token = "rs_" + "t" * 40

    def __init__(self, *, steps: int = 1, groups: int = 2, group_size: int = 2, between_polls: int = 1,
                 completion_delay_s: float = 0.0, tool_calls: bool = False) -> None:
        self.total_steps, self.group_count, self.group_size = steps, groups, group_size
        self.between_polls = between_polls
        self.completion_delay_s = completion_delay_s
        self.tool_calls = tool_calls  # answer a user message that comes with tools by calling the first tool
        self.step: int | None = 1
        self.status = "running"
        self.statuses: list[str] = []  # scripted statuses answered (with no step) before the run goes on
        self.errors: list[tuple[int, Any]] = []  # scripted answers to the next submissions
        self.state_errors: list[tuple[int, dict[str, str]]] = []  # scripted answers (status, headers) to GETs
        self.requests: list[Recorded] = []
        self.submissions: list[dict[str, Any]] = []
        self._submitted: set[int] = set()
        self._idle = 0
        self._lock = threading.Lock()

    @property
    def completions(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def state_polls(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/rollouts/")]

    def state(self) -> dict[str, Any]:
        with self._lock:
            if self.statuses:
                return self._json(self.statuses.pop(0), None)
            if self.step is None and self.status == "running":
                self._idle -= 1
                if self._idle < 0:
                    self.step = self._next
            return self._json(self.status, self.step)

    def _json(self, status: str, step: int | None) -> dict[str, Any]:
        base = f"http://127.0.0.1:{self.port}/api/runs/{RUN_ID}/openai/v1"
        groups = [] if step is None else [
            {"group_index": i, "scenario": {"id": f"s{step}-{i}", "user_message": f"task {step}.{i}", "context": None,
                                            "metadata": {"k": i}}, "submitted": i in self._submitted}
            for i in range(self.group_count)]
        return {"run": RUN_ID, "name": "double", "status": status, "step": step,
                "model": None if step is None else f"run@{step - 1}", "deadline_s": None if step is None else 30.0,
                "timeout_s": 30.0, "on_missing": "skip", "allow_unsampled": False, "group_size": self.group_size,
                "system_prompt": "Be brief.", "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8},
                "total_steps": self.total_steps, "openai_base_url": base, "groups": groups}

    def submit(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            if self.errors:
                return self.errors.pop(0)
            if body.get("step") != self.step or body.get("group_index") in self._submitted:
                return 409, {"detail": f"step {body.get('step')} group {body.get('group_index')} is not open"}
            self._submitted.add(body["group_index"])
            self.submissions.append(body)
            if len(self._submitted) == self.group_count:  # the step closes; the engine trains
                self._submitted = set()
                self._next = self.step + 1
                self.step, self._idle = None, self.between_polls
                if self._next > self.total_steps:
                    self.status = "completed"
            return 201, {"step": body["step"], "group_index": body["group_index"],
                         "trajectories": len(body["trajectories"])}

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.completion_delay_s)  # lets concurrent trajectories' calls overlap
        last = body["messages"][-1] if body.get("messages") else {"role": "user", "content": ""}
        message: dict[str, Any] = {"role": "assistant", "content": f"echo: {last['content']}"}
        if self.tool_calls and body.get("tools") and last["role"] == "user":  # asks for the first tool, once
            name = body["tools"][0]["function"]["name"]
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": name, "arguments": json.dumps({"expression": "6 * 7"})}}]}
        return {"id": "chatcmpl-double", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model"), "choices": [{"index": 0, "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}

    def __enter__(self) -> StudioDouble:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            def _record(self) -> Recorded:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                recorded = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                    json.loads(raw) if raw else None)
                with double._lock:
                    double.requests.append(recorded)
                return recorded

            def do_GET(self) -> None:
                self._record()
                if self.headers.get("Authorization") != f"Bearer {double.token}":
                    return self._answer(401, {"detail": "Invalid token."})
                if self.path == f"/api/runs/{RUN_ID}/rollouts/":
                    if double.state_errors:
                        status, headers = double.state_errors.pop(0)
                        return self._answer(status, {"detail": "slow down"}, headers)
                    return self._answer(200, double.state())
                if re.fullmatch(r"/api/runs/\d+/rollouts/", self.path):
                    return self._answer(403, {"detail": "This token belongs to another project."})
                self._answer(404, {"detail": "Not found."})

            def do_POST(self) -> None:
                recorded = self._record()
                if self.headers.get("Authorization") != f"Bearer {double.token}":
                    return self._answer(401, {"detail": "Invalid token."})
                if self.path == f"/api/runs/{RUN_ID}/rollouts/groups/":
                    return self._answer(*double.submit(recorded.body))
                if self.path == f"/api/runs/{RUN_ID}/openai/v1/chat/completions":
                    return self._answer(200, double.completion(recorded.body))
                self._answer(404, {"detail": "Not found."})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
