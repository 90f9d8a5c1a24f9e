"""The run page's websocket: authenticate, check membership, replay what the page missed, then stream.

Client: connect to /ws/runs/<id>/?after=<last seq the page has>; every message is {"seq", "kind", "data"},
in seq order with no duplicates. A user who is not a member of the run's project is refused at the handshake,
exactly like an unknown run (the 404 of the pages and the API). Membership is checked again while the socket
is open: when the project's members change (and at least every RECHECK_S while events flow), and a user who
has lost access is disconnected with code 4403.

Pacing: the first event after a quiet spell goes out at once; what arrives in the WINDOW_S after a send goes
out together at the end of it, folded (`fold`): an event whose only effect on the page is superseded by a later
one of the same window is not sent. The page then ends where the full stream would leave it, and `seq` still
only grows; a reconnect resumes from the last seq the page has. The process receives each event once and
hands it to its sockets (fanout.py).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.selectors import access, runs as run_selectors
from webapp.live.fanout import encode, run_fanout
from webapp.live.publish import project_group

REPLAY_BATCH = 2000
RECHECK_S = 30.0  # a missed access.changed message (Redis blip) keeps a removed user at most this long
WINDOW_S = 0.1  # a page is sent at most ~10 times a second, however fast the run's events come
# Kinds the run page uses only for the run summary every event carries (phase, progress): a later event of
# the same window carries a newer one (static/webapp/run.js, evaluation.js).
SUMMARY_ONLY = frozenset({"group_rolled_out", "judge_usage", "train_step"})


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


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(access.run_visible)(user=user, run_id=self.run_id):
            await self.close(code=4404)
            return
        self.project_id = await database_sync_to_async(access.run_project_id)(run_id=self.run_id)
        self.checked_at = time.monotonic()
        self.last_sent = _after(self.scope.get("query_string", b""))
        self._pending: list[tuple[dict[str, Any], str]] = []
        self._wake = asyncio.Event()
        self._sending = asyncio.Lock()
        self._fanout = run_fanout(self.channel_layer)
        # Join before reading the backlog: an event committed in between arrives twice at worst, and
        # `last_sent` drops the duplicate; joining after would lose it.
        await self.channel_layer.group_add(project_group(self.project_id), self.channel_name)
        await self._fanout.join(self.run_id, self._deliver)
        await self.accept()
        await self._replay()
        self._flusher = asyncio.create_task(self._flush_loop())

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "_fanout"):
            self._stop_streaming()
            await self.channel_layer.group_discard(project_group(self.project_id), self.channel_name)

    def _stop_streaming(self) -> None:
        self._fanout.leave(self.run_id, self._deliver)
        if hasattr(self, "_flusher") and self._flusher is not asyncio.current_task():
            self._flusher.cancel()

    async def receive_json(self, content, **kwargs) -> None:
        # A client that detects a gap (e.g. after sleeping) asks for a replay from what it has.
        if isinstance(content, dict) and isinstance(content.get("after"), int):
            self.last_sent = min(self.last_sent, max(0, content["after"]))
            await self._replay()

    async def _replay(self) -> None:
        async with self._sending:
            while True:
                events = await database_sync_to_async(run_selectors.run_events_after)(
                    run_id=self.run_id, after=self.last_sent, limit=REPLAY_BATCH)
                await self._send([(m, None) for m in events])
                if len(events) < REPLAY_BATCH:
                    return

    async def _send(self, batch: list[tuple[dict[str, Any], str | None]]) -> None:
        fresh = [(m, text) for m, text in batch if m["seq"] > self.last_sent]
        if not fresh:
            return
        texts = {id(m): text for m, text in fresh}
        self.last_sent = fresh[-1][0]["seq"]
        for message in fold([m for m, _ in fresh]):
            await self.send(text_data=texts[id(message)] or encode(message))

    def _deliver(self, message: dict[str, Any], text: str) -> None:
        """Called by the process's relay for each event of the run; sent by `_flush_loop`."""
        self._pending.append((message, text))
        self._wake.set()

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if time.monotonic() - self.checked_at > RECHECK_S and not await self._still_allowed():
                return
            if batch and batch[0][0]["seq"] > self.last_sent + 1:
                await self._replay()  # an event was lost in transit (Redis blip, full channel): from the DB
            async with self._sending:
                await self._send(batch)
            await asyncio.sleep(WINDOW_S)  # what arrives meanwhile goes out together, folded

    async def access_changed(self, message: dict) -> None:
        await self._still_allowed()

    async def _still_allowed(self) -> bool:
        self.checked_at = time.monotonic()
        if await database_sync_to_async(access.run_visible)(user=self.scope["user"], run_id=self.run_id):
            return True
        self._stop_streaming()  # nothing more reaches a socket that lost access, even before it is gone
        await self.close(code=4403)
        return False


def _after(query_string: bytes) -> int:
    from urllib.parse import parse_qs

    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    try:
        return max(0, int(values[0]))
    except ValueError:
        return 0
