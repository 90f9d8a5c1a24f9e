"""Try it streams (issue 48): the rollout child (webapp/execution/try_child.py) asks the local inference server
with `stream: true` and reports each column's answer as it grows, so the session page (which re-renders from
what the child reports) shows the first tokens before the answer is whole; the environment still gets the whole
completion, so the final text is the server's unstreamed answer. No Django: the child and the server only."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local_server import start_local_server
from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT
from training.servers import InferenceServer

ROOT = Path(__file__).resolve().parents[2]
BOARD = "New game. Board:\n. . 2 .\n. . . .\n. 2 . .\n. . . ."


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceServer]:
    srv = start_local_server(tiny_model_dir, tmp_path_factory.mktemp("try-stream") / "server.log")
    yield srv
    srv.stop()


def _child_lines(server: InferenceServer, models: list[str]) -> list[tuple[float, dict]]:
    """The child's reports, each with the moment it arrived, in the order it wrote them."""
    spec = {"base_url": server.base_url, "token": "unused", "environment": {"kind": "chat", "options": {}},
            "system_prompt": DEMO_SYSTEM_PROMPT, "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 24},
            "scenario": {"id": "board", "user_message": BOARD, "context": None, "metadata": {}},
            "models": models, "timeout_s": 60}
    proc = subprocess.Popen([sys.executable, "-m", "webapp.execution.try_child"], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(spec) + "\n")
    proc.stdin.close()
    lines = [(time.monotonic(), json.loads(line)) for line in proc.stdout]
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return lines


def _answer(record: dict) -> str:
    return next(m["content"] for m in reversed(record["messages"]) if m["role"] == "assistant")


def test_each_column_reports_its_first_tokens_before_its_answer_is_whole_and_ends_with_the_unstreamed_answer(
        server: InferenceServer) -> None:
    with server.client() as client:
        unstreamed = client.chat.completions.create(
            model="base", temperature=0.0, top_p=1.0, max_tokens=24,
            messages=[{"role": "system", "content": DEMO_SYSTEM_PROMPT}, {"role": "user", "content": BOARD}],
        ).choices[0].message.content
    assert unstreamed and len(unstreamed) > 1
    lines = _child_lines(server, ["base", "base"])
    for column in (0, 1):
        reports = [(at, r) for at, r in lines if r.get("column") == column]
        statuses = [r["status"] for _, r in reports]
        assert statuses[-1] == "done" and set(statuses[:-1]) == {"answering"}, statuses
        texts = [_answer(r) for _, r in reports]
        first = next(t for t in texts if t)
        # the first report already has text, and less than the whole answer: it came while the answer was sampled
        assert texts[0] == first and unstreamed.startswith(first) and len(first) < len(unstreamed), texts
        assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:])), texts  # it only grows
        assert texts[-1] == unstreamed  # what the session keeps, and a reload shows, is the unstreamed answer
        assert reports[0][0] <= reports[-1][0]
        done = reports[-1][1]["messages"]
        assert [m["role"] for m in done] == ["system", "user", "assistant"]


def test_a_tool_call_streamed_in_pieces_as_vllm_sends_it_is_put_back_together_for_the_environment() -> None:
    from openai.types.chat import ChatCompletionChunk

    from webapp.execution.streamed_completion import StreamedCompletion, assistant_message

    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "demo@2"}

    def chunk(delta: dict, **choice) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate({**base, "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, **choice}]})

    parts = StreamedCompletion()
    grew = [parts.add(c) for c in [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me look."}, token_ids=[5, 6]),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "search_inbox", "arguments": ""}}]}, token_ids=[7]),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"keywords": '}}]}, token_ids=[8]),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Raven"}'}}]}, token_ids=[9],
              finish_reason="tool_calls"),
        ChatCompletionChunk.model_validate({**base, "choices": [], "usage": {
            "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
    ]]
    assert grew == [False, True, True, True, True, False]
    completion = parts.completion()
    assert completion.model == "demo@2" and completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage.completion_tokens == 5 and completion.choices[0].model_extra["token_ids"] == [5, 6, 7, 8, 9]
    assert assistant_message(completion) == {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search_inbox", "arguments": '{"keywords": "Raven"}'}}]}
