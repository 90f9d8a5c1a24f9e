"""The attacker's world for the run's endpoint (tests/security/test_endpoint_*.py): a fake inference server that
records, at the HTTP boundary, every request the endpoint forwards to it, and an external run of an ordinary
account's own project whose current step points at that server, with a project token (what the attacker's
agent process holds)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rest_framework.test import APIClient

from tests.webapp.factories import agent_factory, judge_factory, project_factory, run_factory
from webapp.live.ingest import run_event_ingest
from webapp.models import RunStatus
from webapp.services.project_tokens import project_token_create

SYSTEM_PROMPT = "Answer the customer's question."
SCENARIOS = ["What is the refund policy?", "Where is my parcel?"]


class FakeUpstream:
    """An OpenAI-compatible server double: answers chat completions (`reply(body)` decides the text; `delay_s`
    how long it takes), lists `served` plus the adapters loaded through it, and records every request."""

    def __init__(self, *, served: str = "base", delay_s: float = 0.0) -> None:
        self.served, self.delay_s = served, delay_s
        self.requests: list[tuple[str, str, Any]] = []  # (method, path, JSON body)
        self.loaded: list[str] = []
        self.answer_padding = 0  # extra bytes in each answer (the answer-size cap's test)
        self.lock = threading.Lock()
        self.reply = lambda body: "ok"
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def chats(self) -> list[dict[str, Any]]:
        with self.lock:
            return [body for method, path, body in self.requests if path == "/v1/chat/completions"]

    def paths(self) -> list[str]:
        with self.lock:
            return [path for _, path, _ in self.requests]

    def __enter__(self) -> FakeUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        text = self.reply(body)
        n = body.get("n") or 1
        choice = lambda i: {  # noqa: E731
            "index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
            "token_ids": [11, 12, 13], "logprobs": {"content": [
                {"token": t, "logprob": -0.25, "bytes": None, "top_logprobs": []} for t in ("a", "b", "c")]}}
        answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                  "model": body.get("model"), "choices": [choice(i) for i in range(n)],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 3 * n, "total_tokens": 5 + 3 * n},
                  "prompt_token_ids": [1, 2, 3, 4, 5]}
        if self.answer_padding:
            answer["padding"] = "x" * self.answer_padding
        return answer

    def _handler(self):
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                with upstream.lock:
                    upstream.requests.append(("GET", self.path, None))
                    names = [upstream.served, *upstream.loaded]
                self._send(200, {"object": "list", "data": [
                    {"id": n, "object": "model", "owned_by": "double", "root": f"/srv/secret/adapters/{n}"}
                    for n in names]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                with upstream.lock:
                    upstream.requests.append(("POST", self.path, body))
                if self.path == "/v1/load_lora_adapter":
                    with upstream.lock:
                        upstream.loaded.append(body["lora_name"])
                    return self._send(200, {"ok": True})
                if self.path == "/v1/unload_lora_adapter":
                    with upstream.lock:
                        if body["lora_name"] not in upstream.loaded:
                            return self._send(404, {"detail": "not loaded"})
                        upstream.loaded.remove(body["lora_name"])
                    return self._send(200, {"ok": True})
                time.sleep(upstream.delay_s)
                self._send(200, upstream._completion(body))

        return Handler


def attackers_run(upstream: FakeUpstream, *, step: int = 1, group_size: int = 2, max_tokens: int = 16,
                  temperature: float = 1.0, options: dict | None = None, status: str = RunStatus.RUNNING,
                  name: str = "my-run"):
    """An ordinary account creates its own project and an external agent's run; the run's step `step` is open
    and served by `upstream`. Returns (run, project token key)."""
    project = project_factory()
    agent = agent_factory(project=project, environment_kind="external", environment_options=options or {},
                          system_prompt=SYSTEM_PROMPT, max_tokens=max_tokens, temperature=temperature)
    run = run_factory(project=project, agent=agent, status=status, judge_config=judge_factory(project=project),
                      external_base_url=upstream.base_url, name=name)
    model = f"{run.config['name']}@{step - 1}" if step > 1 else "base"
    upstream.served = model
    run_event_ingest(run_id=run.id, event={
        "kind": "rollouts_wanted", "step": step, "model": model, "base_url": upstream.base_url, "timeout_s": 600,
        "on_missing": "skip", "allow_unsampled": False, "group_size": group_size, "system_prompt": SYSTEM_PROMPT,
        "sampling": {"temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens},
        "groups": [{"group_index": i, "scenario": {"id": f"s{i + 1}", "user_message": text, "context": None,
                                                   "metadata": {}}} for i, text in enumerate(SCENARIOS)]})
    _, key = project_token_create(user=project.owner, project=project, name="my agent")
    return run, key


def opening(group: int = 0) -> list[dict[str, str]]:
    """What a rollout of group `group` begins with (the client's `step.messages(scenario)`)."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": SCENARIOS[group]}]


def agent_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def chat(client: APIClient, run, body: dict[str, Any] | bytes, trajectory: str | None = None):
    headers = {"HTTP_X_TRAJECTORY_ID": trajectory} if trajectory else {}
    path = f"/api/runs/{run.id}/openai/v1/chat/completions"
    if isinstance(body, bytes):
        return client.post(path, body, content_type="application/json", **headers)
    return client.post(path, body, format="json", **headers)
