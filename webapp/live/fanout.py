"""One subscription per web process and run, however many pages of that process watch the run.

Measured (bench/web_bench.py, issue 23): with a channel per socket in `run_<id>`, every event cost Redis one
message per socket and daphne one pop, one decode and one JSON encoding per socket; at 50 sockets daphne spent
8x the CPU of one socket and the run's ingest, beside it on two cores, slowed 1.7x. Here the process joins the
run's group once (a relay channel), receives each event once, encodes it once, and hands it to its local
sockets, which send it in their own time (consumers.py folds and paces what they send).
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from webapp.live.publish import run_group

log = logging.getLogger(__name__)

Deliver = Callable[[dict[str, Any], str], None]  # (the event message, its JSON text as sent to browsers)


def encode(message: dict[str, Any]) -> str:
    return json.dumps({"seq": message["seq"], "kind": message["kind"], "data": message["data"]})


class RunFanout:
    """The relays of one channel layer on one event loop (daphne has one; each async test has its own)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self._watchers: dict[int, list[Deliver]] = {}
        self._relays: dict[int, asyncio.Task] = {}
        self._ready: dict[int, asyncio.Future] = {}

    def watching(self, run_id: int) -> int:
        return len(self._watchers.get(run_id, ()))

    async def join(self, run_id: int, deliver: Deliver) -> None:
        """Returns once the relay is in the run's group: an event stored afterwards reaches `deliver`."""
        self._watchers.setdefault(run_id, []).append(deliver)
        if run_id not in self._relays or self._relays[run_id].done():  # first watcher, or a relay that failed
            self._ready[run_id] = asyncio.get_running_loop().create_future()
            self._relays[run_id] = asyncio.create_task(self._relay(run_id), name=f"run-{run_id}-relay")
        await asyncio.shield(self._ready[run_id])

    def leave(self, run_id: int, deliver: Deliver) -> None:
        watchers = self._watchers.get(run_id, [])
        if deliver in watchers:
            watchers.remove(deliver)
        if watchers or run_id not in self._relays:
            return
        del self._watchers[run_id]
        self._ready.pop(run_id, None)
        self._relays.pop(run_id).cancel()  # it leaves the group on its way out

    async def _relay(self, run_id: int) -> None:
        # The default prefix: channels_redis reads every process-local channel through one Redis key, and a
        # channel under another prefix would wait behind the sockets' own reads.
        channel = await self.layer.new_channel()
        try:
            await self.layer.group_add(run_group(run_id), channel)
            self._ready[run_id].set_result(None)
            while True:
                message = await self.layer.receive(channel)
                if message.get("type") != "run.event":
                    continue
                text = encode(message)
                for deliver in list(self._watchers.get(run_id, ())):
                    try:
                        deliver(message, text)
                    except Exception:  # one broken socket must not starve the others
                        log.exception("run %s: a live socket could not take event %s", run_id, message.get("seq"))
        except BaseException as err:
            ready = self._ready.get(run_id)
            if ready is not None and not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else RuntimeError("relay stopped"))
            raise
        finally:
            try:
                await asyncio.shield(self.layer.group_discard(run_group(run_id), channel))
            except Exception:
                pass


_FANOUTS: dict[tuple[int, int], tuple[asyncio.AbstractEventLoop, RunFanout]] = {}


def run_fanout(layer: Any) -> RunFanout:
    """This loop's fan-out for `layer` (created on first use; those of closed loops are forgotten)."""
    loop = asyncio.get_running_loop()
    for key, (owner, _) in list(_FANOUTS.items()):
        if owner.is_closed():
            del _FANOUTS[key]
    key = (id(loop), id(layer))
    if key not in _FANOUTS or _FANOUTS[key][1].layer is not layer:
        _FANOUTS[key] = (loop, RunFanout(layer))
    return _FANOUTS[key][1]
