"""Langfuse traces (issue 49): the trackers' thread hands each scored trajectory to the official SDK, which a local
double of the Langfuse host receives: OpenTelemetry spans at /api/public/otel/v1/traces (decoded here with
OpenTelemetry's own protobuf classes) and scores at /api/public/scores. A host that refuses them is an alert
(`tracker_failed`), never an exception in the run."""
from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("langfuse")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from tests.http_receiver import start_receiver  # noqa: E402
from training.events import GroupScored, ReviewApplied, RunFinished, RunStarted, TrackerFailed  # noqa: E402
from training.monitoring.trackers import TrackersConfig, TrackingSink  # noqa: E402

TOOL_TRAJECTORY = {
    "messages": [{"role": "user", "content": "What is a fjord?"},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "c1", "type": "function",
                      "function": {"name": "lookup", "arguments": "{\"q\": \"fjord\"}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "a long narrow sea inlet"},
                 {"role": "assistant", "content": "A long narrow inlet of the sea."}],
    "judge_score": 0.9, "explanation": "Correct, and it used the tool.", "reward": 0.9}
PLAIN_TRAJECTORY = {"messages": [{"role": "user", "content": "What is a fjord?"},
                                 {"role": "assistant", "content": "A lake."}],
                    "judge_score": 0.2, "explanation": "Wrong: a fjord is an inlet.", "reward": 0.2}


@pytest.fixture
def langfuse_double(monkeypatch, request):
    receiver, server = start_receiver()
    # The SDK keeps one client per public key in a process: each test its own key.
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", f"pk-lf-test-{request.node.name}")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-test")
    yield receiver
    server.shutdown()
    server.server_close()


def _spans(receiver) -> list:
    spans = []
    for r in receiver.received:
        if r.path == "/api/public/otel/v1/traces":
            body = gzip.decompress(r.body) if r.headers.get("content-encoding") == "gzip" else r.body
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return spans


def _attributes(span) -> dict:
    return {a.key: a.value.string_value or list(v.string_value for v in a.value.array_value.values)
            for a in span.attributes}


def _scores(receiver) -> list[dict]:
    scores = []
    for r in receiver.received:
        if r.path.startswith("/api/public/scores"):
            body = json.loads(r.body)
            scores += body if isinstance(body, list) else [body]
    return scores


def _run(receiver, events) -> list:
    seen: list = []
    trackers = TrackersConfig.model_validate({"langfuse": {"host": receiver.url, "flush_interval_s": 0.2},
                                              "run_id": "rubric-studio-run-7", "flush_timeout_s": 30})
    sink = TrackingSink(seen.append, trackers, "fjords", {})
    for event in events:
        sink(event)
    sink.close()
    return seen


def test_each_trajectory_is_a_trace_of_its_step_with_its_tool_calls_judge_scores_and_the_human_override(
        langfuse_double):
    seen = _run(langfuse_double, [
        RunStarted(run_name="fjords", start_step=1, total_steps=1, resumed=False),
        GroupScored(step=1, group_index=0, scenario_id="s1", trajectories=[TOOL_TRAJECTORY, PLAIN_TRAJECTORY],
                    reward_mean=0.55, reward_std=0.35, skipped=False),
        # a reviewer raised B's reward from 0.2 to 0.6 before the step trained
        ReviewApplied(step=1, groups=[{"group_index": 0, "rewards": [0.9, 0.6], "advantages": [1.0, -1.0],
                                       "skipped": False}]),
        RunFinished(status="completed", steps_done=1)])

    assert not [e for e in seen if isinstance(e, TrackerFailed)]
    spans = _spans(langfuse_double)
    roots = {s.trace_id.hex(): _attributes(s) for s in spans if s.name == "trajectory"}
    assert len(roots) == 2
    for attributes in roots.values():
        assert attributes["session.id"] == "rubric-studio-run-7/step-1"
        assert attributes["langfuse.trace.tags"] == ["step-1"]
    names = sorted(a["langfuse.trace.name"] for a in roots.values())
    assert names == ["fjords step 1 group 1 A", "fjords step 1 group 1 B"]
    tool = [s for s in spans if s.name == "lookup"]
    assert len(tool) == 1 and _attributes(tool[0])["langfuse.observation.type"] == "tool"
    assert "a long narrow sea inlet" in _attributes(tool[0])["langfuse.observation.output"]
    (a_trace,) = [t for t, a in roots.items() if a["langfuse.trace.name"].endswith(" A")]
    assert "A long narrow inlet of the sea." in roots[a_trace]["langfuse.observation.output"]

    scores = {(s["traceId"], s["name"]): s for s in _scores(langfuse_double)}
    assert scores[(a_trace, "judge")]["value"] == 0.9
    assert scores[(a_trace, "judge")]["comment"] == "Correct, and it used the tool."
    (b_trace,) = set(roots) - {a_trace}
    assert scores[(b_trace, "human_override")]["value"] == 0.6
    assert (a_trace, "human_override") not in scores  # A's reward was left as the judge gave it
    assert {name for _, name in scores} == {"judge", "reward", "human_override"}


def test_a_langfuse_host_that_refuses_the_traces_is_an_alert_and_never_an_error(langfuse_double):
    langfuse_double.statuses = [401] * 50
    seen = _run(langfuse_double, [
        RunStarted(run_name="fjords", start_step=1, total_steps=1, resumed=False),
        GroupScored(step=1, group_index=0, scenario_id="s1", trajectories=[PLAIN_TRAJECTORY],
                    reward_mean=0.2, reward_std=0.0, skipped=False),
        RunFinished(status="completed", steps_done=1)])

    failures = [e for e in seen if isinstance(e, TrackerFailed)]
    assert [f.tracker for f in failures] == ["langfuse"]
    assert "Langfuse" in failures[0].error
    # the run's own events all reached its sink, in order
    assert [e.kind for e in seen if not isinstance(e, TrackerFailed)] == ["run_started", "group_scored",
                                                                          "run_finished"]
