"""Inside the Celery processes (webapp/celery_app.py loads this module): a worker beats its presence every
STUDIO_HEARTBEAT_S from a thread of its main process, counts how each task ended, and beat notes each task it
sends. heartbeats.py keeps all three in Redis, where the web process reads them (/readyz, /metrics).

Recording is advisory: a Redis error is logged and never fails a task or stops a worker.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import (
    beat_init, before_task_publish, task_failure, task_rejected, task_retry, task_revoked, task_success,
    task_unknown, worker_ready, worker_shutdown,
)
from django.conf import settings

from webapp.operations import heartbeats

log = logging.getLogger(__name__)
_stop = threading.Event()
_in_beat = False


def _queues(consumer: Any) -> list[str]:
    try:
        queues = consumer.app.amqp.queues
        return sorted(queues.consume_from or queues)
    except AttributeError:
        return []


@worker_ready.connect
def start_presence_beat(sender: Any = None, **_: Any) -> None:
    worker, queues = sender.hostname, _queues(sender)

    def beat() -> None:
        failing = False
        while True:
            try:
                heartbeats.worker_beat(worker=worker, queues=queues)
                failing = False
            except Exception:  # noqa: BLE001 - Redis away: readiness says so; the worker goes on
                if not failing:
                    log.warning("worker %s: its presence was not recorded", worker, exc_info=True)
                failing = True
            if _stop.wait(settings.STUDIO_HEARTBEAT_S):
                return

    _stop.clear()
    threading.Thread(target=beat, daemon=True, name="studio-presence").start()


@worker_shutdown.connect
def stop_presence_beat(sender: Any = None, **_: Any) -> None:
    _stop.set()
    try:
        heartbeats.worker_gone(worker=getattr(sender, "hostname", "") or "")
    except Exception:  # noqa: BLE001
        log.warning("a stopping worker could not say so", exc_info=True)


def _count(task: str, outcome: str) -> None:
    try:
        heartbeats.task_outcome_count(task=task or "unknown", outcome=outcome)
    except Exception:  # noqa: BLE001
        log.warning("task %s: its outcome (%s) was not counted", task, outcome, exc_info=True)


@task_success.connect
def _success(sender: Any = None, **_: Any) -> None:
    _count(getattr(sender, "name", ""), "success")


@task_failure.connect
def _failure(sender: Any = None, **_: Any) -> None:
    _count(getattr(sender, "name", ""), "failure")


@task_retry.connect
def _retry(sender: Any = None, **_: Any) -> None:
    _count(getattr(sender, "name", ""), "retry")


@task_revoked.connect
def _revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    _count(getattr(sender, "name", "") or getattr(request, "task", ""), "revoked")


@task_rejected.connect
def _rejected(message: Any = None, **_: Any) -> None:
    _count((getattr(message, "headers", None) or {}).get("task", ""), "rejected")


@task_unknown.connect
def _unknown(name: str = "", **_: Any) -> None:
    _count(name, "unknown")


@beat_init.connect
def _beat_started(**_: Any) -> None:
    global _in_beat
    _in_beat = True


@before_task_publish.connect
def _beat_sent(**_: Any) -> None:
    # Every process that sends tasks fires this; only beat's sends say that beat is alive.
    if _in_beat:
        try:
            heartbeats.beat_sent()
        except Exception:  # noqa: BLE001
            log.warning("beat: a sent task was not noted", exc_info=True)
