"""How many calls a run's endpoint has waiting on the run's server, per run, across every web process (Redis
when configured, this process otherwise): a caller beyond STUDIO_EXTERNAL_MAX_IN_FLIGHT gets 429. Each call holds
a slot that expires on its own after its timeout, so a web process killed mid-call leaks nothing for long.
Synchronous and short: the endpoint calls these from its database steps (a thread), never from the event loop."""
from __future__ import annotations

import threading
import time
import uuid
from functools import lru_cache

from django.conf import settings

GRACE_S = 30.0  # a slot outlives its call's timeout by this much before it counts as leaked


@lru_cache(maxsize=4)
def _redis(url: str):
    import redis

    # A synchronous client in a worker thread: no asyncio.wait_for around its socket (see the channel layer's
    # settings for why that matters on Python 3.11), and its timeouts are plain socket timeouts.
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


_local: dict[str, dict[str, float]] = {}
_local_lock = threading.Lock()


def _key(scope: str) -> str:
    prefix = settings.CACHES["default"].get("KEY_PREFIX") or "studio"  # the deployment's (and a test's) own
    return f"{prefix}:external-in-flight:{scope}"


def inflight_acquire(*, scope: str, cap: int, hold_s: float) -> str | None:
    """A slot for one call (its id), or None when `scope` (`run:<id>`, or `project-server:<id>` for a checkpoint
    served after its run) has `cap` calls in flight already."""
    slot, now = uuid.uuid4().hex, time.time()
    if not settings.REDIS_URL:
        with _local_lock:
            slots = {k: v for k, v in _local.get(scope, {}).items() if v > now}
            if len(slots) >= cap:
                _local[scope] = slots
                return None
            slots[slot] = now + hold_s + GRACE_S
            _local[scope] = slots
        return slot
    key, client = _key(scope), _redis(settings.REDIS_URL)
    pipe = client.pipeline(transaction=True)
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.zadd(key, {slot: now + hold_s + GRACE_S})
    pipe.zcard(key)
    pipe.expire(key, int(hold_s + 2 * GRACE_S))
    held = pipe.execute()[2]
    if held > cap:
        client.zrem(key, slot)
        return None
    return slot


def inflight_release(*, scope: str, slot: str) -> None:
    if not settings.REDIS_URL:
        with _local_lock:
            _local.get(scope, {}).pop(slot, None)
        return
    _redis(settings.REDIS_URL).zrem(_key(scope), slot)


def inflight_count(*, scope: str) -> int:
    now = time.time()
    if not settings.REDIS_URL:
        with _local_lock:
            return sum(v > now for v in _local.get(scope, {}).values())
    return int(_redis(settings.REDIS_URL).zcount(_key(scope), now, "+inf"))


def inflight_totals() -> dict[str, int]:
    """Calls in flight now per kind of scope (`run`, `project-server`): across every web process with Redis, this
    process's without it. Read by /metrics (webapp/operations/metrics.py)."""
    now, totals = time.time(), {}
    if not settings.REDIS_URL:
        with _local_lock:
            for scope, slots in _local.items():
                kind = scope.partition(":")[0]
                totals[kind] = totals.get(kind, 0) + sum(v > now for v in slots.values())
        return totals
    client, prefix = _redis(settings.REDIS_URL), _key("")
    for key in client.scan_iter(match=f"{prefix}*", count=500):
        kind = key.decode()[len(prefix):].partition(":")[0]
        totals[kind] = totals.get(kind, 0) + int(client.zcount(key, now, "+inf"))
    return totals
