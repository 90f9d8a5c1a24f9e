"""An OpenAI-compatible judge API double: a real HTTP server in a thread that answers `/v1/chat/completions`
(and Anthropic's `/v1/messages`, for `anthropic/` models pointed at `double.url`).

Tests drive the judge through real litellm and real HTTP against it; nothing of ours is mocked (DESIGN §6).

    from tests.judge_double import JudgeDouble

    with JudgeDouble() as double:                       # binds 127.0.0.1 on a free port
        double.queue({"scores": [...]})                 # scripted replies, served in order
        double.fail_next(429, times=2)                  # inject HTTP errors before the next replies
        await judging.ruler(lists, double.model, extra_litellm_params=double.litellm_params)
        double.requests[0].body["messages"]             # every request is recorded

`double.usage = (prompt, completion)` sets the tokens every reply reports and `double.cached_tokens` how many
of the prompt tokens it says the provider's prompt cache served.

When the queue is empty the double calls its `responder` (a function of the request), e.g.
`JudgeDouble(responder=JudgeDouble.score_by(rule))`, which finds the trajectory blocks in the judge prompt and
scores each with `rule(text) -> float`: long-running engine and web tests use that. With neither, the double
answers 400 with a message saying the script ran out, so a test that makes an unexpected call fails loudly.

Pytest: the `judge_double` fixture below (re-exported by `tests/judging/conftest.py`; import it into your own
conftest with `from tests.judge_double import judge_double`) starts a double and points the judge cache at a
temporary directory so tests never share or keep cache entries.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest

# Reply forms: a str is sent as the message content verbatim (so tests can send broken JSON), a dict/list is
# JSON-encoded as the content, an HttpError is sent as that status, a callable computes one of these.
Reply = Any

# The judge prompt tags each trajectory as <trajectory id="N"> ... </trajectory> (judging/prompt.py).
_BLOCK = re.compile(r'<trajectory id="([^"]+)">\n?(.*?)</trajectory>', re.S)


# litellm asks an Anthropic model without native structured output for JSON through a forced tool of this name.
_JSON_TOOL = "json_tool_call"


def _content_text(content: Any) -> str:
    """A message content as text: a string as it is, content blocks (OpenAI or Anthropic) their text joined."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


@dataclass
class HttpError:
    status: int
    message: str = "injected error"
    retry_after: float | None = None


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]  # names lower-cased: headers["authorization"]
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def prompt_text(self) -> str:
        """Every message's content joined (an Anthropic request's system too): handy for
        `assert "x" in request.prompt_text`."""
        system = [self.body["system"]] if "system" in self.body else []
        return "\n".join(_content_text(c) for c in system + [m.get("content") for m in self.messages])

    def trajectory_blocks(self) -> dict[str, str]:
        """The trajectory id → tagged text the judge was shown (last user message: the latest attempt)."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return dict(_BLOCK.findall(_content_text(users[0].get("content")))) if users else {}

    def criteria_names(self) -> list[str]:
        """The criterion names the reply schema asks for (empty when the judge scores a single total)."""
        fmt = self.body.get("response_format") or {}
        schema = ((fmt.get("json_schema") or {}).get("schema") or (self.body.get("output_format") or {}).get("schema")
                  or next((t["input_schema"] for t in self.body.get("tools") or [] if t.get("name") == _JSON_TOOL), {}))
        defs = schema.get("$defs", {})
        for d in defs.values():
            crit = d.get("properties", {}).get("criteria")
            if crit:
                ref = crit.get("$ref", "").rsplit("/", 1)[-1]
                return list(defs.get(ref, crit).get("properties", {}))
        return []


class JudgeDouble:
    model = "openai/judge"

    def __init__(
        self,
        replies: list[Reply] | None = None,
        *,
        responder: Callable[[RecordedRequest], Reply] | None = None,
        latency_s: float = 0.0,
        usage: tuple[int, int] = (120, 30),
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self.responder = responder
        self.latency_s = latency_s
        self.usage = usage  # (prompt_tokens, completion_tokens) reported on every reply
        # Of the prompt tokens, how many the reply says were read from the provider's prompt cache
        # (OpenAI: usage.prompt_tokens_details.cached_tokens; Anthropic: usage.cache_read_input_tokens).
        self.cached_tokens = cached_tokens
        # ... and how many it says were written to that cache (Anthropic: usage.cache_creation_input_tokens,
        # billed above the plain input price; OpenAI has no such field)
        self.cache_write_tokens = cache_write_tokens
        self._queue: list[Reply] = list(replies or [])
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests the double was serving at once
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> "JudgeDouble":
        double = self

        class Handler(BaseHTTPRequestHandler):
            # Without this every small response waits on Nagle + delayed ACK (~40 ms); with it a call is ~7 ms.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                lowered = {k.lower(): v for k, v in self.headers.items()}
                status, payload, headers = double._handle(self.path, lowered, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval makes stop() take milliseconds instead of serve_forever's default 0.5 s.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="judge-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "JudgeDouble":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "start() the double first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_base(self) -> str:
        return self.url + "/v1"

    @property
    def litellm_params(self) -> dict[str, Any]:
        """What to pass as `extra_litellm_params` so litellm talks to this double."""
        return {"api_base": self.api_base, "api_key": "test"}

    # -- scripting -------------------------------------------------------------------------------------------
    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def fail_next(self, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        """The next `times` requests get HTTP `status` (served before anything already queued)."""
        with self._lock:
            self._queue[:0] = [HttpError(status, retry_after=retry_after) for _ in range(times)]

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @staticmethod
    def scores_reply(scores: dict[str, float], explanation: str = "scripted") -> dict[str, Any]:
        """The judge's JSON for {id: score}, in the given order."""
        return {"scores": [{"trajectory_id": i, "explanation": f"{explanation} {i}", "score": s}
                           for i, s in scores.items()]}

    @staticmethod
    def score_by(rule: Callable[[str], float]) -> Callable[[RecordedRequest], dict[str, Any]]:
        """A responder that scores each trajectory block of the prompt with `rule(block_text)`.

        When the reply schema asks for named criteria, every criterion gets the rule's score.
        """

        def respond(request: RecordedRequest) -> dict[str, Any]:
            names = request.criteria_names()
            items = []
            for tid, text in request.trajectory_blocks().items():
                s = float(rule(text))
                item: dict[str, Any] = {"trajectory_id": tid, "explanation": f"rule gave {s:.3f}"}
                if names:
                    item["criteria"] = {n: s for n in names}
                else:
                    item["score"] = s
                items.append(item)
            return {"scores": items}

        return respond

    @staticmethod
    def prefer_first(rule: Callable[[str], float], bonus: float = 0.5) -> Callable[[RecordedRequest], dict[str, Any]]:
        """A position-biased judge: scores each block by `(1 - bonus) * rule(text)`, and the block shown FIRST
        gets `bonus` on top, whatever it says (a judge that favours the first answer it reads)."""
        score = JudgeDouble.score_by(rule)

        def respond(request: RecordedRequest) -> dict[str, Any]:
            reply = score(request)
            first = next(iter(request.trajectory_blocks()), None)
            for item in reply["scores"]:
                base = float(item["score"]) * (1 - bonus)
                item["score"] = round(base + (bonus if item["trajectory_id"] == first else 0.0), 6)
            return reply

        return respond

    # -- serving ---------------------------------------------------------------------------------------------
    def _handle(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, dict]:
        request = RecordedRequest(path=path, headers=headers, body=body)
        with self._lock:
            self.requests.append(request)
            reply = self._queue.pop(0) if self._queue else None
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
            return self._reply(request, reply)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _reply(self, request: RecordedRequest, reply: Reply) -> tuple[int, Any, dict]:
        path, body = request.path, request.body
        anthropic = path.rstrip("/").endswith("/v1/messages")
        if not anthropic and not path.rstrip("/").endswith("/chat/completions"):
            return 404, {"error": {"message": f"judge double serves only chat completions and Anthropic messages, "
                                              f"not {path}"}}, {}
        if reply is None:
            if self.responder is None:
                # 400, not 5xx: the judge must not retry this; an unexpected call fails the test at once.
                return 400, {"error": {"message": "judge double: no scripted reply left", "type": "script"}}, {}
            reply = self.responder
        if callable(reply):
            reply = reply(request)
        if isinstance(reply, HttpError):
            extra = {"Retry-After": str(reply.retry_after)} if reply.retry_after is not None else {}
            err = {"error": {"message": reply.message, "type": "injected", "code": str(reply.status)}}
            return reply.status, err, extra
        content = reply if isinstance(reply, str) else json.dumps(reply)
        prompt_tokens, completion_tokens = self.usage
        if anthropic:
            return 200, self._anthropic_reply(body, content), {}
        details = {"prompt_tokens_details": {"cached_tokens": self.cached_tokens}} if self.cached_tokens else {}
        return 200, {
            "id": f"chatcmpl-double-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "judge"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens, **details},
        }, {}

    def _anthropic_reply(self, body: dict[str, Any], content: str) -> dict[str, Any]:
        """The reply in Anthropic's Messages format (what litellm's `anthropic/` models call): the JSON as text,
        or as the forced JSON tool's input when litellm asked through that tool."""
        prompt_tokens, completion_tokens = self.usage
        if any(t.get("name") == _JSON_TOOL for t in body.get("tools") or []):
            try:
                block: dict[str, Any] = {"type": "tool_use", "id": "toolu_double", "name": _JSON_TOOL,
                                         "input": json.loads(content)}
            except json.JSONDecodeError:
                block = {"type": "text", "text": content}
        else:
            block = {"type": "text", "text": content}
        return {"id": f"msg_double_{len(self.requests)}", "type": "message", "role": "assistant",
                "model": body.get("model", "judge"), "content": [block],
                "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens - self.cached_tokens - self.cache_write_tokens,
                          "output_tokens": completion_tokens, "cache_read_input_tokens": self.cached_tokens,
                          "cache_creation_input_tokens": self.cache_write_tokens}}


@pytest.fixture
def judge_double(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeDouble]:
    """A started JudgeDouble; the judge cache goes to a fresh temporary directory for the test."""
    monkeypatch.setenv("RUBRIC_STUDIO_JUDGE_CACHE", str(tmp_path_factory.mktemp("judge-cache")))
    with JudgeDouble() as double:
        yield double


def marker_or_brevity(text: str) -> float:
    """The last `quality X` marker in a trajectory's text; without one, shorter is better (a deterministic
    rule that still spreads scores, so a training run against the double gets non-zero advantages)."""
    found = re.findall(r"quality (\d(?:\.\d+)?)", text)
    return float(found[-1]) if found else round(1.0 / (1.0 + len(text) / 200.0), 4)


def main(argv: list[str] | None = None) -> None:
    """Serve a double in its own process (e.g. for a web-app subprocess, or a benchmark that must not share
    a GIL with the double): `python -m tests.judge_double [--latency S] [--port P]`. It prints its api_base
    on the first stdout line and scores each trajectory with `marker_or_brevity`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m tests.judge_double")
    p.add_argument("--latency", type=float, default=0.0, help="seconds to wait before each reply")
    args = p.parse_args(argv)
    double = JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity), latency_s=args.latency).start()
    print(double.api_base, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        double.stop()


if __name__ == "__main__":
    main()
