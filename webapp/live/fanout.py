"""One subscription, one pacing window and one encoding per web process and run, however many pages watch it.

Measured (bench/web_bench.py, issue 23): with a channel per socket in `run_<id>`, every event cost Redis one
message per socket and daphne one pop, one decode and one JSON encoding per socket; at 50 sockets daphne spent
8x the CPU of one socket and the run's ingest, beside it on two cores, slowed 1.7x. Sockets that each folded,
paced and encoded their own copy still cost daphne one frame per event per socket (1.60x at 50). Here the
process joins the run's group once (a relay channel), receives each event once, and per WINDOW_S folds what
arrived (`fold`) and encodes it once, as one frame; every socket that is caught up sends that same text.

Pacing: the first event after a quiet spell goes out at once; what arrives in the WINDOW_S after a frame goes
out together at the end of it. A frame is a JSON array of {"seq", "kind", "data"} in seq order; an event whose
only effect on the page is superseded by a later one of the same window is left out, and the frame's last
event is always its window's last, so the page ends where the full stream would leave it.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

from webapp.live.publish import run_group

log = logging.getLogger(__name__)

WINDOW_S = 0.1  # a page is sent at most ~10 frames a second, however fast the run's events come
# Kinds the run page uses only for the run summary every event carries (phase, progress): a later event of
# the same window carries a newer one (static/webapp/run.js, evaluation.js).
SUMMARY_ONLY = frozenset({"group_rolled_out", "judge_usage", "train_step", "model_download"})


@dataclass(frozen=True)
class Frame:
    """One window of a run's events as the relay received them (`events`, in seq order) and, for every socket
    that has everything before them, the frame to send: those events folded, as JSON."""
    events: list[dict[str, Any]]
    text: str

    @property
    def first(self) -> int:
        return self.events[0]["seq"]

    @property
    def last(self) -> int:
        return self.events[-1]["seq"]


Deliver = Callable[[Frame], None]


def encode(message: dict[str, Any]) -> str:
    return json.dumps({"seq": message["seq"], "kind": message["kind"], "data": message["data"]})


def encode_frame(messages: list[dict[str, Any]]) -> str:
    return "[" + ",".join(encode(m) for m in messages) + "]"


def fold(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of one window (in seq order) that change what the page shows; the last is always kept,
    so the page's seq and run summary are the newest. Dropped: summary-only kinds; a group card's update when
    a later one of the window replaces it (a resumed step re-scoring the same slot, another override of the
    same group) or when the window also scores that group (the page fetches the card after the window, as it
    is now)."""
    scored = {m["data"].get("group_id") for m in messages if m["kind"] == "group_scored"}
    later_slots: set[tuple[Any, Any]] = set()
    later_overrides: set[Any] = set()
    kept: list[dict[str, Any]] = []
    for i in range(len(messages) - 1, -1, -1):
        m, data = messages[i], messages[i]["data"]
        last = i == len(messages) - 1
        if m["kind"] == "group_scored":
            slot = (data.get("step"), data.get("group_index"))
            drop = slot in later_slots
            later_slots.add(slot)
        elif m["kind"] == "override":
            drop = data.get("group_id") in later_overrides or data.get("group_id") in scored
            later_overrides.add(data.get("group_id"))
        else:
            drop = m["kind"] in SUMMARY_ONLY
        if last or not drop:
            kept.append(m)
    kept.reverse()
    return kept


class RunFanout:
    """The relays of one channel layer on one event loop (daphne has one; each async test has its own)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self._watchers: dict[int, list[Deliver]] = {}
        self._relays: dict[int, asyncio.Task] = {}
        self._ready: dict[int, asyncio.Future] = {}
        self._pending: dict[int, list[dict[str, Any]]] = {}
        self._sent_at: dict[int, float] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}

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
        self._pending.pop(run_id, None)
        self._sent_at.pop(run_id, None)
        if run_id in self._timers:
            self._timers.pop(run_id).cancel()
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
                if message.get("type") == "run.event":
                    self._queue(run_id, message)
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

    def _queue(self, run_id: int, message: dict[str, Any]) -> None:
        self._pending.setdefault(run_id, []).append(message)
        if run_id in self._timers:
            return  # this window's frame is already due
        loop = asyncio.get_running_loop()
        wait = self._sent_at.get(run_id, float("-inf")) + WINDOW_S - loop.time()
        if wait <= 0:
            self._flush(run_id)
        else:
            self._timers[run_id] = loop.call_later(wait, self._flush, run_id)

    def _flush(self, run_id: int) -> None:
        self._timers.pop(run_id, None)
        batch = self._pending.pop(run_id, [])
        if not batch:
            return
        self._sent_at[run_id] = asyncio.get_running_loop().time()
        frame = Frame(events=batch, text=encode_frame(fold(batch)))
        for deliver in list(self._watchers.get(run_id, ())):
            try:
                deliver(frame)
            except Exception:  # one broken socket must not starve the others
                log.exception("run %s: a live socket could not take events %s-%s", run_id, frame.first, frame.last)


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


def run_watchers_count() -> int:
    """Sockets watching a run live in this process, over every loop (/metrics: studio_websocket_watchers). Read
    from another thread while the loop runs, so it copies before counting and retries a dict that changed."""
    for _ in range(3):
        try:
            return sum(len(watchers) for _, fanout in list(_FANOUTS.values())
                       for watchers in list(fanout._watchers.values()))
        except RuntimeError:  # changed size during iteration: count again
            continue
    return 0
