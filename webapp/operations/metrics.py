"""The Prometheus exposition of /metrics (docs/webapp.md "Metrics" lists every name).

Where the truth is a row (runs, steps, judge calls) or a Redis record every process shares (workers, task
outcomes, calls in flight, the broker's queues), it is read at scrape time by StudioCollector: the numbers are
the deployment's, whichever web process answers. Counters read from rows go down when a run is deleted, which
Prometheus takes for a counter reset. Only studio_endpoint_calls_refused_total and studio_websocket_watchers are
this process's own (counters.py, the live fan-out), plus the standard process_* metrics.

A source that fails (database, Redis) is left out of that scrape and reported as studio_metrics_source_up 0, so
one broken part never hides the others and never turns the scrape into an error.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Iterator

from django.conf import settings
from django.db.models import Count, FloatField, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.utils import timezone
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from webapp.models import JudgeCall, Run, RunStatus, Step
from webapp.operations import heartbeats
from webapp.operations.counters import ENDPOINT_CALLS_REFUSED

log = logging.getLogger(__name__)
# The engine's step_finished timings (training/rl/loop.py, training/sft/loop.py, training/monitoring/checks.py) and
# the stage each one names.
STAGES = {"rollout": "time_rollout_s", "scoring": "time_scoring_s", "wait_rollouts": "time_wait_rollouts_s",
          "train": "time_train_s", "load": "time_load_s", "eval": "time_eval_s", "step": "time_step_s"}
# kombu's Redis transport keeps a queue's prioritised messages under these suffixes beside the plain list.
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


def _queue_wait_start(created_at: datetime, enqueued_at: datetime | None, started_at: datetime | None) -> datetime:
    # A run that never started waits since its launch; a resumed one since it was queued again (enqueued_at,
    # which the reaper's re-send also moves, after STUDIO_REQUEUE_AFTER_S).
    return created_at if started_at is None or enqueued_at is None else enqueued_at


def _runs() -> Iterator[Metric]:
    by_status = dict(Run.objects.order_by().values_list("status").annotate(n=Count("id")))
    runs = GaugeMetricFamily("studio_runs", "Runs by status.", labels=["status"])
    for status in RunStatus.values:
        runs.add_metric([status], by_status.get(status, 0))
    yield runs
    queued = list(Run.objects.filter(status=RunStatus.QUEUED).values_list("created_at", "enqueued_at", "started_at"))
    yield GaugeMetricFamily("studio_run_queue_depth", "Runs queued for a worker.", value=len(queued))
    now = timezone.now()
    oldest = max(((now - _queue_wait_start(*row)).total_seconds() for row in queued), default=0.0)
    yield GaugeMetricFamily("studio_run_queue_oldest_wait_seconds",
                            "How long the longest-waiting queued run has waited (0 with none queued).", value=oldest)


def _steps() -> Iterator[Metric]:
    aggregates = {}
    for stage, key in STAGES.items():
        value = Cast(KT(f"metrics__{key}"), FloatField())
        aggregates[f"{stage}_sum"], aggregates[f"{stage}_count"] = Sum(value), Count(KT(f"metrics__{key}"))
    totals = Step.objects.order_by().aggregate(**aggregates)
    family = SummaryMetricFamily("studio_step_stage_seconds", "Seconds the stored steps spent per stage (the "
                                 "engine's step timings; `step` is the whole step).", labels=["stage"])
    for stage in STAGES:
        family.add_metric([stage], count_value=totals[f"{stage}_count"] or 0, sum_value=totals[f"{stage}_sum"] or 0.0)
    yield family


def _judge() -> Iterator[Metric]:
    rows = (JudgeCall.objects.order_by().values("judge_model", "cached")
            .annotate(calls=Count("id"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"),
                      cost=Sum("cost_usd")))
    calls = CounterMetricFamily("studio_judge_calls", "Judge calls recorded, by judge model and whether the "
                                "judge's cache answered.", labels=["judge_model", "cached"])
    tokens = CounterMetricFamily("studio_judge_tokens", "Judge tokens, by judge model and kind (prompt, completion).",
                                 labels=["judge_model", "kind"])
    cost = CounterMetricFamily("studio_judge_cost_usd", "Judge spend in US dollars, by judge model.",
                               labels=["judge_model"])
    per_model: dict[str, list[float]] = {}
    for row in rows:
        calls.add_metric([row["judge_model"], str(row["cached"]).lower()], row["calls"])
        summed = per_model.setdefault(row["judge_model"], [0, 0, 0.0])
        summed[0] += row["prompt"] or 0
        summed[1] += row["completion"] or 0
        summed[2] += row["cost"] or 0.0
    for model, (prompt, completion, spent) in sorted(per_model.items()):
        tokens.add_metric([model, "prompt"], prompt)
        tokens.add_metric([model, "completion"], completion)
        cost.add_metric([model], spent)
    yield from (calls, tokens, cost)


def _celery() -> Iterator[Metric]:
    from webapp.execution.dispatch import QUEUES

    client = heartbeats.redis_client()
    queues = GaugeMetricFamily("studio_celery_queue_messages", "Messages waiting in the broker, by Celery queue.",
                               labels=["queue"])
    for queue in sorted(set(QUEUES.values())):
        queues.add_metric([queue], sum(int(client.llen(queue + suffix)) for suffix in PRIORITY_SUFFIXES))
    outcomes = CounterMetricFamily("studio_celery_tasks", "Celery tasks ended, by task and outcome (success, "
                                   "failure, retry, revoked, rejected, unknown).", labels=["task", "outcome"])
    for (task, outcome), count in sorted(heartbeats.task_outcomes().items()):
        outcomes.add_metric([task, outcome], count)
    recent = [w for w in heartbeats.workers_seen() if w.age_s <= settings.STUDIO_STALE_AFTER_S]
    workers = GaugeMetricFamily("studio_workers_heard", "Celery workers heard from within STUDIO_STALE_AFTER_S, "
                                "by queue they consume.", labels=["queue"])
    for queue in sorted(set(QUEUES.values()) | {q for w in recent for q in w.queues}):
        workers.add_metric([queue], sum(queue in w.queues for w in recent))
    yield from (queues, outcomes, workers)


def _endpoint() -> Iterator[Metric]:
    from webapp.services.external_inflight import inflight_totals

    totals = {"run": 0, "project-server": 0, **inflight_totals()}
    family = GaugeMetricFamily("studio_endpoint_calls_in_flight", "Calls waiting on an inference server through a "
                               "run's endpoint (run) or a project's served checkpoints (project-server).",
                               labels=["scope"])
    for scope, count in sorted(totals.items()):
        family.add_metric([scope], count)
    yield family


def _watchers() -> Iterator[Metric]:
    from webapp.live.fanout import run_watchers_count

    yield GaugeMetricFamily("studio_websocket_watchers", "Run pages watching live through this process.",
                            value=run_watchers_count())


class StudioCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("studio_metrics_source_up", "1 when the source answered this scrape; its metrics are "
                               "missing when 0.", labels=["source"])
        sources = {"database": (_runs, _steps, _judge)}
        if settings.REDIS_URL:
            sources["redis"] = (_celery, _endpoint)
        for source, parts in sources.items():
            try:
                metrics = [metric for part in parts for metric in part()]
            except Exception:  # noqa: BLE001 - say the source is down; the other sources still answer
                log.warning("/metrics: %s did not answer", source, exc_info=True)
                metrics = []
            up.add_metric([source], 1 if metrics else 0)
            yield from metrics
        if not settings.REDIS_URL:  # the embedded setup: the calls in flight are this process's
            yield from _endpoint()
        yield from _watchers()
        yield up


REGISTRY = CollectorRegistry(auto_describe=False)  # no describe(): nothing is read until a scrape
REGISTRY.register(StudioCollector())
REGISTRY.register(ENDPOINT_CALLS_REFUSED)
ProcessCollector(registry=REGISTRY)


def metrics_exposition(*, accept: str) -> tuple[bytes, str]:
    """(body, content type) in the format the scraper asked for."""
    encoder, content_type = choose_encoder(accept)
    return encoder(REGISTRY), content_type
