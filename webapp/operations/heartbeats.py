"""What the Celery processes tell the web process through Redis: which workers are alive (and for which queues),
how their tasks ended, and when beat last sent a task. Redis hashes, so several workers writing at once never
overwrite one another; readers are /readyz, /metrics and beat's health check.

Only with Celery (REDIS_URL): the embedded setup has no worker process to hear from.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings

# Fields of workers not heard from for this long are dropped when read: a worker that died without saying so
# (killed, its host gone) leaves no entry behind for ever.
FORGET_AFTER_S = 24 * 3600.0


@lru_cache(maxsize=4)
def _client(url: str):
    import redis

    # Short plain socket timeouts: a probe must answer "down" quickly rather than hang on a dead Redis.
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def redis_client(url: str | None = None):
    return _client(url or settings.REDIS_URL)


def _key(name: str) -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX") or "studio"  # the deployment's (and a test's) own
    return f"{prefix}:ops:{name}"


@dataclass(frozen=True)
class WorkerSeen:
    name: str
    queues: tuple[str, ...]
    age_s: float


def worker_beat(*, worker: str, queues: list[str]) -> None:
    """`worker` (its Celery node name) is alive now and consumes `queues`."""
    redis_client().hset(_key("workers"), worker, json.dumps({"at": time.time(), "queues": sorted(queues)}))


def worker_gone(*, worker: str) -> None:
    """A worker that stops cleanly says so: readiness does not wait STUDIO_STALE_AFTER_S to notice."""
    redis_client().hdel(_key("workers"), worker)


def workers_seen() -> list[WorkerSeen]:
    """Every worker that beat in the last FORGET_AFTER_S, newest first (the caller decides what is recent)."""
    client, now, seen, stale = redis_client(), time.time(), [], []
    for name, raw in client.hgetall(_key("workers")).items():
        try:
            record = json.loads(raw)
            age = now - float(record["at"])
        except (ValueError, KeyError, TypeError):
            age, record = FORGET_AFTER_S + 1, {}
        if age > FORGET_AFTER_S:
            stale.append(name)
            continue
        seen.append(WorkerSeen(name=name.decode(), queues=tuple(record.get("queues") or ()), age_s=max(age, 0.0)))
    if stale:
        client.hdel(_key("workers"), *stale)
    return sorted(seen, key=lambda w: w.age_s)


def task_outcome_count(*, task: str, outcome: str) -> None:
    """One more `task` ended with `outcome` (success, failure, retry, revoked, rejected, unknown)."""
    redis_client().hincrby(_key("task-outcomes"), f"{task}|{outcome}", 1)


def task_outcomes() -> dict[tuple[str, str], int]:
    """{(task, outcome): count} since the deployment's Redis was created (it keeps them on its volume)."""
    counts = {}
    for field, value in redis_client().hgetall(_key("task-outcomes")).items():
        task, _, outcome = field.decode().rpartition("|")
        counts[(task, outcome)] = int(value)
    return counts


def beat_sent() -> None:
    redis_client().set(_key("beat-sent-at"), str(time.time()))


def beat_last_sent_age_s() -> float | None:
    raw = redis_client().get(_key("beat-sent-at"))
    return None if raw is None else max(time.time() - float(raw), 0.0)
