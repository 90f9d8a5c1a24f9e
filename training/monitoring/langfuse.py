"""Langfuse traces of a run's trajectories, through the official `langfuse` SDK (OpenTelemetry spans to the
host's /api/public/otel/v1/traces, scores to /api/public/scores).

One trace per scored trajectory, with a stable id (derived from the run, step, group and trajectory), named
"<run> step <s> group <g> <label>", in session "<run id>/step-<s>" and tagged "step-<s>": a step's trajectories
are one session. The trace's observation holds the conversation (input: the messages before the last one;
output: the last one), each tool call a child observation of type `tool` (its arguments in, the tool's answer
out). Scores on the trace: `judge` (with the judge's explanation as the comment), `reward` (what GRPO used) and,
where a person's review changed it before training, `human_override` (the reviewed reward).

Where it reports comes from the deployment: the host in the run's config (a site setting), the keys in the
workers' LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY. The SDK sends in background threads; an export it could not
deliver is noticed here and raised at the next event (or at the run's end, after a flush), which
training/monitoring/trackers.py turns into a `tracker_failed` alert: never a failed run.
"""
from __future__ import annotations

import base64
import os
from typing import Any

from training.config.trackers import LangfuseSettings
from training.events import Event, GroupScored, ReviewApplied
from training.types import trajectory_label

PUBLIC_KEY_ENV, SECRET_KEY_ENV = "LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"


class LangfuseUnavailable(RuntimeError):
    """The Langfuse host refused or lost what the SDK sent; the run goes on without it."""


def _watched(inner: Any) -> Any:
    """The SDK's OTLP exporter, remembering a failed export (the SDK only logs it)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Watched(SpanExporter):
        failure: str | None = None

        def export(self, spans: Any) -> Any:
            try:
                result = inner.export(spans)
            except Exception as err:  # noqa: BLE001 - recorded and raised on the tracker's thread
                result, self.failure = SpanExportResult.FAILURE, f"{type(err).__name__}: {err}"
            if result != SpanExportResult.SUCCESS and self.failure is None:
                self.failure = f"{len(spans)} trace spans were not accepted by the Langfuse host"
            return result

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return Watched()


def _tool_calls(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Any]]:
    """Each assistant tool call with the tool's answer (matched by tool_call_id; None when none came)."""
    answers = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    return [(call, answers.get(call.get("id"))) for m in messages if m.get("role") == "assistant"
            for call in m.get("tool_calls") or [] if isinstance(call, dict)]


class LangfuseTracer:
    name = "langfuse"

    def __init__(self, settings: LangfuseSettings, trackers: Any, run_name: str, config: dict[str, Any]) -> None:
        from langfuse import Langfuse
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider

        public, secret = os.environ.get(PUBLIC_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, "")
        if not public or not secret:
            raise LangfuseUnavailable(f"{PUBLIC_KEY_ENV} and {SECRET_KEY_ENV} must be set in the worker's "
                                      "environment to send traces to Langfuse")
        host = settings.host.rstrip("/")
        auth = base64.b64encode(f"{public}:{secret}".encode()).decode()
        # The SDK's own exporter settings, watched (it would only log a failed export); a tracer provider of our
        # own, so no other OpenTelemetry user in the process sends through it.
        self.exporter = _watched(OTLPSpanExporter(
            endpoint=f"{host}/api/public/otel/v1/traces", timeout=10,
            headers={"Authorization": f"Basic {auth}", "x-langfuse-public-key": public,
                     "x-langfuse-ingestion-version": "4"}))
        self.client = Langfuse(public_key=public, secret_key=secret, base_url=host, environment=settings.environment,
                               flush_interval=settings.flush_interval_s, span_exporter=self.exporter,
                               tracer_provider=TracerProvider(), timeout=10)
        self.run_key = trackers.run_id or run_name
        self.run_name, self.run_url = run_name, trackers.run_url
        self.rewards: dict[tuple[int, int], list[float | None]] = {}  # (step, group) -> rewards as scored

    def _check(self) -> None:
        if self.exporter.failure:
            raise LangfuseUnavailable(self.exporter.failure)

    def trace_id(self, step: int, group: int, index: int) -> str:
        return self.client.create_trace_id(seed=f"{self.run_key}/{step}/{group}/{index}")

    def on_event(self, event: Event) -> None:
        self._check()
        if isinstance(event, GroupScored):
            self._group(event)
        elif isinstance(event, ReviewApplied):
            self._reviewed(event)

    def _group(self, event: GroupScored) -> None:
        from langfuse import propagate_attributes

        step, group = event.step, event.group_index
        self.rewards[(step, group)] = [t.get("reward") for t in event.trajectories]
        session = f"{self.run_key}/step-{step}"[:200]
        for index, t in enumerate(event.trajectories):
            label = trajectory_label(index)
            trace_id = self.trace_id(step, group, index)
            messages = [m for m in t.get("messages") or [] if isinstance(m, dict)]
            metadata = {"run": self.run_name, "step": step, "group": group, "trajectory": label,
                        "scenario_id": event.scenario_id, "role": event.role or None, "run_url": self.run_url,
                        "env_reward": t.get("env_reward"), "criteria": t.get("criteria") or None,
                        "error": t.get("error")}
            with propagate_attributes(session_id=session, tags=[f"step-{step}"],
                                      trace_name=f"{self.run_name} step {step} group {group + 1} {label}"[:200]):
                root = self.client.start_observation(
                    trace_context={"trace_id": trace_id}, name="trajectory", as_type="agent",
                    input=messages[:-1], output=messages[-1:] or None, metadata=metadata,
                    level="ERROR" if t.get("error") else None)
                for call, answer in _tool_calls(messages):
                    function = call.get("function") or {}
                    root.start_observation(name=str(function.get("name") or "tool"), as_type="tool",
                                           input=function.get("arguments"), output=answer).end()
                root.end()
            if t.get("judge_score") is not None:
                self.client.create_score(name="judge", value=float(t["judge_score"]), trace_id=trace_id,
                                         data_type="NUMERIC", comment=(t.get("explanation") or None))
            if t.get("reward") is not None:
                self.client.create_score(name="reward", value=float(t["reward"]), trace_id=trace_id,
                                         data_type="NUMERIC")

    def _reviewed(self, event: ReviewApplied) -> None:
        """A reward a person changed before the step trained (the review gate, or overrides made in time)."""
        for g in event.groups:
            group = int(g.get("group_index", -1))
            scored = self.rewards.get((event.step, group)) or []
            for index, (before, after) in enumerate(zip(scored, g.get("rewards") or [])):
                if after is not None and before is not None and float(after) != float(before):
                    self.client.create_score(name="human_override", value=float(after), data_type="NUMERIC",
                                             trace_id=self.trace_id(event.step, group, index),
                                             comment=f"reviewed reward (the judge's gave {float(before):g})")

    def log(self, step: int, data: dict[str, Any]) -> None:
        self._check()  # metrics go to the metric trackers; this one traces trajectories (on_event)

    def finish(self, status: str) -> None:
        self.client.flush()
        try:
            self._check()
        finally:
            self.client.shutdown()
