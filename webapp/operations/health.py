"""Readiness: can this web process do its work now? Each check answers ok or says what is down, in words that
name no address, user or password (the probes need no login, so anyone who reaches them reads the answer).

The checks run side by side, each on a thread of its own, and one that has not answered within CHECK_TIMEOUT_S
counts as down: a probe must answer in time even when a host swallows packets instead of refusing them.
On the embedded default (SQLite, the in-memory channel layer, the in-process executor) Redis and workers are
"not used" and count as ready; the database and the channel layer are checked as they are.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connections
from pydantic import BaseModel, ConfigDict

from webapp.operations import heartbeats

CHECK_TIMEOUT_S = 5.0
VENDORS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    used: bool = True  # False: the setup does without it (the embedded default), so it cannot be down
    detail: str


class Readiness(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ready: bool
    down: list[str]  # the names of the checks that failed, for a person reading a probe's log
    checks: dict[str, Check]


def _ms(started: float) -> str:
    return f"{(time.monotonic() - started) * 1000:.0f} ms"


def _failed(what: str, err: BaseException) -> Check:
    # The exception's class only: its message may carry the host, the user or the URL with its password.
    return Check(ok=False, detail=f"{what} ({type(err).__name__})")


def database_check() -> Check:
    connection = connections["default"]
    name, started = VENDORS.get(connection.vendor, connection.vendor), time.monotonic()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as err:  # noqa: BLE001 - any failure is "down", said below
        return _failed(f"{name} does not answer", err)
    finally:
        connection.close()  # this thread's own connection: nothing may keep it open after the probe
    return Check(ok=True, detail=f"{name} answered in {_ms(started)}")


def redis_check() -> Check:
    if not settings.REDIS_URL:
        return Check(ok=True, used=False, detail="not used: the embedded setup keeps its cache, channel layer and "
                                                 "work queue in this process (no REDIS_URL)")
    started = time.monotonic()
    try:
        heartbeats.redis_client(settings.REDIS_URL).ping()
    except Exception as err:  # noqa: BLE001
        return _failed("Redis does not answer", err)
    return Check(ok=True, detail=f"Redis answered in {_ms(started)}")


async def _round_trip(layer) -> None:
    try:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "readyz.ping"})
        message = await layer.receive(channel)
        if message.get("type") != "readyz.ping":
            raise RuntimeError("the channel layer returned another message")
    finally:
        if hasattr(layer, "close_pools"):
            await layer.close_pools()


def channel_layer_check() -> Check:
    from channels.layers import channel_layers

    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    if "InMemory" in backend:
        return Check(ok=True, detail="in-memory layer: live updates reach this process's pages only (embedded)")
    started = time.monotonic()
    try:
        # A layer of its own: the process's layer receives on daphne's event loop, and one layer cannot receive
        # on two loops at once.
        async_to_sync(_round_trip)(channel_layers.make_backend("default"))
    except Exception as err:  # noqa: BLE001
        return _failed("a message sent through the channel layer did not come back", err)
    return Check(ok=True, detail=f"a message went through the channel layer and back in {_ms(started)}")


def workers_check() -> Check:
    from webapp.execution.dispatch import QUEUES

    if settings.STUDIO_EXECUTOR == "inprocess":
        return Check(ok=True, used=False, detail="not used: the in-process executor runs the work in this process")
    try:
        seen = [w for w in heartbeats.workers_seen() if w.age_s <= settings.STUDIO_STALE_AFTER_S]
    except Exception as err:  # noqa: BLE001
        return _failed("cannot tell: the workers' heartbeats are in Redis, which does not answer", err)
    within = f"in the last {settings.STUDIO_STALE_AFTER_S:.0f} s"
    if not seen:
        return Check(ok=False, detail=f"no Celery worker heard from {within}: queued work waits")
    per_queue = {queue: sum(queue in w.queues for w in seen) for queue in sorted(set(QUEUES.values()))}
    missing = [queue for queue, count in per_queue.items() if not count]
    detail = (f"{len(seen)} worker(s) heard from {within}; per queue: "
              + ", ".join(f"{queue} {count}" for queue, count in per_queue.items()))
    if missing:
        detail += f"; no worker on {', '.join(missing)}: its work waits"
    return Check(ok=True, detail=detail)


CHECKS: dict[str, Callable[[], Check]] = {"database": database_check, "redis": redis_check,
                                          "channel_layer": channel_layer_check, "workers": workers_check}


def readiness() -> Readiness:
    results: dict[str, Check] = {}

    def run(name: str, check: Callable[[], Check]) -> None:
        results[name] = check()

    threads = [threading.Thread(target=run, args=(name, check), daemon=True, name=f"readyz-{name}")
               for name, check in CHECKS.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))
    checks = {name: results.get(name) or Check(ok=False, detail=f"no answer within {CHECK_TIMEOUT_S:.0f} s")
              for name in CHECKS}
    down = [name for name, check in checks.items() if not check.ok]
    return Readiness(ready=not down, down=down, checks=checks)
