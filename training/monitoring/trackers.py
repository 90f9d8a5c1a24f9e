"""Experiment trackers (issue 37): a run's metrics to Weights & Biases and/or MLflow, beside the run's own events.

`tracking(config, sink)` wraps the run's event sink once (training.train): every event still goes to `sink`
first, then onto a queue that one background thread hands to each tracker. A step never waits for a tracker (the
queue is unbounded; the `wandb` and `mlflow` imports happen on that thread), and a tracker that fails is an alert,
not a failed run: it is dropped for the rest of the run and reported once as a `tracker_failed` event, on the
loop's thread at its next event. At the run's end the thread gets `flush_timeout_s` to send what is queued.

What is logged, per tracker: the run's config and a link back to its page at the start; each `step_finished`'s
numeric metrics at its step (reward, loss, learning rate, eval_* ...); the held-out loss and evaluations at their
steps; each checkpoint's name (W&B: `checkpoint` in the step's row and the `checkpoints` summary list; MLflow: tag
`checkpoint.<step>`); the end status. Where the trackers write comes from the deployment, never from a person:
W&B's project/entity/mode/dir and its key in WANDB_API_KEY; MLflow's tracking URI, experiment and its own
MLFLOW_TRACKING_* variables. Offline use needs no account: `mode: offline` (W&B writes a local run directory) and a
`file:` tracking URI (MLflow's file store; MLFLOW_ALLOW_FILE_STORE=true is set for it).
A tracker with an `on_event` method is handed every event too: Langfuse (training/monitoring/langfuse.py) traces the
scored trajectories themselves.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import threading
import time
from typing import Any, Iterator

from training.config.trackers import MlflowSettings, TrackersConfig, WandbSettings
from training.events import (CheckpointSaved, EvaluationFinished, Event, EventSink, HeldOutLoss, RunFailed, RunFinished,
                             StepFinished, TrackerFailed)

log = logging.getLogger(__name__)


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numeric values (bools and None left out)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def step_metrics(event: Event) -> tuple[int, dict[str, Any]] | None:
    """(step, what to log at it) for the events that carry metrics, else None."""
    if isinstance(event, StepFinished):
        return event.step, _numbers(event.metrics)
    if isinstance(event, HeldOutLoss) and event.loss is not None:
        return event.step, {"held_out_loss": float(event.loss)}
    if isinstance(event, EvaluationFinished):  # its metrics are named eval_* already
        return event.step, _numbers(event.metrics)
    if isinstance(event, CheckpointSaved):
        return event.step, {"checkpoint": event.adapter_name}
    return None


class _Wandb:
    name = "wandb"

    def __init__(self, settings: WandbSettings, trackers: TrackersConfig, run_name: str, config: dict[str, Any]):
        import wandb

        self.checkpoints: list[str] = []
        self.run = wandb.init(
            project=settings.project, entity=settings.entity, mode=settings.mode, dir=settings.dir, name=run_name,
            id=trackers.run_id, resume="allow" if trackers.run_id else None, notes=trackers.run_url,
            config={**config, "rubric_studio_url": trackers.run_url}, reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))

    def log(self, step: int, data: dict[str, Any]) -> None:
        if "checkpoint" in data:
            self.checkpoints.append(data["checkpoint"])
            self.run.summary["checkpoints"] = list(self.checkpoints)
        self.run.log(data, step=step)

    def finish(self, status: str) -> None:
        import wandb

        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status in ("completed", "cancelled", "paused") else 1)
        # finish() can return before W&B's service has written everything (an offline run's file ends short);
        # teardown waits for it. The engine's process reports one run, so nothing else of W&B is cut short.
        wandb.teardown()


class _Mlflow:
    name = "mlflow"

    def __init__(self, settings: MlflowSettings, trackers: TrackersConfig, run_name: str, config: dict[str, Any]):
        if settings.tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's local store, for offline use
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=settings.tracking_uri)
        experiment = self.client.get_experiment_by_name(settings.experiment)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(settings.experiment)
        tags = {"rubric_studio.run": run_name, **({"rubric_studio.url": trackers.run_url} if trackers.run_url else {}),
                **({"rubric_studio.run_id": trackers.run_id} if trackers.run_id else {})}
        self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in _flat(config).items()]
        for i in range(0, len(params), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log(self, step: int, data: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        if "checkpoint" in data:
            self.client.set_tag(self.run_id, f"checkpoint.{step}", data["checkpoint"])
        metrics = [Metric(k, v, now, step) for k, v in data.items() if k != "checkpoint"]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def finish(self, status: str) -> None:
        state = {"completed": "FINISHED", "cancelled": "KILLED", "paused": "FINISHED"}.get(status, "FAILED")
        self.client.set_tag(self.run_id, "rubric_studio.status", status)
        self.client.set_terminated(self.run_id, state)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


class TrackingSink:
    """The run's sink, and a background thread that reports the same events to the trackers."""

    def __init__(self, sink: EventSink, trackers: TrackersConfig, run_name: str, config: dict[str, Any]) -> None:
        self.sink, self.trackers, self.run_name, self.config = sink, trackers, run_name, config
        self.queue: queue.Queue[Event | None] = queue.Queue()
        self.failures: queue.Queue[TrackerFailed] = queue.Queue()
        self.active: list[Any] = []
        self.thread = threading.Thread(target=self._work, daemon=True, name="trackers")
        self.thread.start()

    def __call__(self, event: Event) -> None:
        self.sink(event)
        self.queue.put(event)
        self._report_failures()

    def _report_failures(self) -> None:
        while True:
            try:
                failure = self.failures.get_nowait()
            except queue.Empty:
                return
            self.sink(failure)

    def _fail(self, name: str, err: BaseException, tracker: Any = None) -> None:
        log.warning("tracker %s failed: %s", name, err)
        if tracker is not None and tracker in self.active:
            self.active.remove(tracker)
        self.failures.put(TrackerFailed(tracker=name, error=f"{type(err).__name__}: {err}"[:2000]))

    def _start(self) -> None:
        from training.monitoring.langfuse import LangfuseTracer  # its SDK is imported here, on this thread

        for name, settings, cls in (("wandb", self.trackers.wandb, _Wandb), ("mlflow", self.trackers.mlflow, _Mlflow),
                                    ("langfuse", self.trackers.langfuse, LangfuseTracer)):
            if settings is None:
                continue
            try:
                self.active.append(cls(settings, self.trackers, self.run_name, self.config))
            except Exception as err:  # noqa: BLE001 - an alert, never the run's failure
                self._fail(name, err)

    def _work(self) -> None:
        started = False
        while True:
            event = self.queue.get()
            if event is None:
                return
            if not started:  # the first event, whatever it is (a resumed run starts with run_started too)
                self._start()
                started = True
            for tracker in list(self.active):
                try:
                    if isinstance(event, (RunFinished, RunFailed)):
                        tracker.finish(event.status if isinstance(event, RunFinished) else "failed")
                        continue
                    if hasattr(tracker, "on_event"):  # a trace viewer takes the trajectories themselves
                        tracker.on_event(event)
                    logged = step_metrics(event)
                    if logged is not None and logged[1]:
                        tracker.log(*logged)
                except Exception as err:  # noqa: BLE001 - an alert, never the run's failure
                    self._fail(tracker.name, err, tracker)
            if isinstance(event, (RunFinished, RunFailed)):
                self.active.clear()

    def close(self) -> None:
        """Waits up to flush_timeout_s for what is queued, then reports the failures seen (on this thread)."""
        self.queue.put(None)
        self.thread.join(timeout=self.trackers.flush_timeout_s)
        if self.thread.is_alive():
            log.warning("the trackers did not finish within %.0f s; their last events may be missing",
                        self.trackers.flush_timeout_s)
        self._report_failures()


def _tracked_config(config: Any) -> dict[str, Any]:
    """The run's settings as the trackers record them: no inline scenarios or conversations (data, not settings)."""
    data = config.model_dump(mode="json", exclude={"scenarios", "trackers", "judge"})
    if isinstance(data.get("sft"), dict):
        data["sft"].pop("conversations", None)
    if config.judge:
        data["judge"] = {k: v for k, v in config.judge.items() if k in ("judge_model", "temperature", "passes")}
    return data


@contextlib.contextmanager
def tracking(config: Any, sink: EventSink) -> Iterator[EventSink]:
    """`sink`, reported to the run config's trackers as well (unchanged when it names none)."""
    trackers: TrackersConfig = config.trackers
    if not trackers.enabled:
        yield sink
        return
    tracked = TrackingSink(sink, trackers, config.name, _tracked_config(config))
    try:
        yield tracked
    finally:
        tracked.close()
