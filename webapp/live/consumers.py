"""The run page's websocket: authenticate, check membership, replay what the page missed, then stream.

Client: connect to /ws/runs/<id>/?after=<last seq the page has>; every frame is a JSON array of events
{"seq", "kind", "data"}, in seq order across frames with no duplicates. A user who is not a member of the run's
project is refused like an unknown run: the handshake is accepted and closed at once with code 4404 (the 404 of
the pages and the API; 4401 for a user not logged in), so the browser sees the code, not an HTTP 403.
Membership is checked again while the socket is open: when the project's members change (and at least every
RECHECK_S while events flow), and a user who has lost access is disconnected with code 4403.

Pacing and folding (fanout.py): the process receives each event once and, per ~100 ms window, folds and
encodes it once; a socket that has everything before the window sends that shared frame as it is. A socket
that is behind (replaying, or a lost event) folds and encodes its own fresh part; a reconnect resumes from the
last seq the page has.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.selectors import access, runs as run_selectors
from webapp.live.fanout import Frame, encode_frame, fold, run_fanout
from webapp.live.publish import project_group

REPLAY_BATCH = 2000
RECHECK_S = 30.0  # a missed access.changed message (Redis blip) keeps a removed user at most this long


class MemberSocket(AsyncJsonWebsocketConsumer):
    """What every live socket of a project's object shares (the run page's, Try it's: try_channel.py): the user
    is let in only as a member of the object's project, and checked again when the project's members change."""

    def visible_project(self, *, user) -> int | None:
        """The project of this socket's object, when `user` may see it; None otherwise (no such object)."""
        raise NotImplementedError

    async def admit(self) -> bool:
        """Joins the project's group (access changes) and returns True; or refuses the socket.
        Refusals accept the handshake and close at once with a code that says why (4401 not logged in, 4404 no
        such object for this user: the 404 of the pages and the API). Closing before accepting would make the
        server answer the handshake with HTTP 403, and a browser then sees only close code 1006."""
        user = self.scope.get("user")
        project_id = None
        if user is not None and user.is_authenticated:
            project_id = await database_sync_to_async(self.visible_project)(user=user)
        if project_id is None:
            await self.accept()
            await self.close(code=4401 if user is None or not user.is_authenticated else 4404)
            return False
        self.project_id = project_id
        self.checked_at = time.monotonic()
        await self.channel_layer.group_add(project_group(self.project_id), self.channel_name)
        return True

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "project_id"):
            self.stop_streaming()
            await self.channel_layer.group_discard(project_group(self.project_id), self.channel_name)

    def stop_streaming(self) -> None:
        """Stops what the socket sends (called once access is lost, and when it closes)."""

    async def access_changed(self, message: dict) -> None:
        await self.still_allowed()

    async def still_allowed(self) -> bool:
        self.checked_at = time.monotonic()
        if await database_sync_to_async(self.visible_project)(user=self.scope["user"]) is not None:
            return True
        self.stop_streaming()  # nothing more reaches a socket that lost access, even before it is gone
        await self.close(code=4403)
        return False


class RunConsumer(MemberSocket):
    def visible_project(self, *, user) -> int | None:
        return access.run_project_id(run_id=self.run_id) if access.run_visible(user=user, run_id=self.run_id) else None

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not await self.admit():
            return
        self.last_sent = _after(self.scope.get("query_string", b""))
        self._pending: list[Frame] = []
        self._wake = asyncio.Event()
        self._sending = asyncio.Lock()
        self._fanout = run_fanout(self.channel_layer)
        # Join before reading the backlog: an event committed in between arrives twice at worst, and
        # `last_sent` drops the duplicate; joining after would lose it.
        await self._fanout.join(self.run_id, self._deliver)
        await self.accept()
        await self._replay()
        self._flusher = asyncio.create_task(self._flush_loop())

    def stop_streaming(self) -> None:
        if not hasattr(self, "_fanout"):
            return
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
                await self._send(events)
                if len(events) < REPLAY_BATCH:
                    return

    async def _send(self, events: list[dict[str, Any]]) -> None:
        """What of `events` the page does not have yet, folded, as one frame of this socket's own."""
        fresh = [m for m in events if m["seq"] > self.last_sent]
        if fresh:
            self.last_sent = fresh[-1]["seq"]
            await self.send(text_data=encode_frame(fold(fresh)))

    def _deliver(self, frame: Frame) -> None:
        """Called by the process's relay with each window's frame; sent by `_flush_loop`."""
        self._pending.append(frame)
        self._wake.set()

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            frames, self._pending = self._pending, []
            if not frames:
                continue
            if time.monotonic() - self.checked_at > RECHECK_S and not await self.still_allowed():
                return
            if frames[0].first > self.last_sent + 1:
                await self._replay()  # an event was lost in transit (Redis blip, full channel): from the DB
            async with self._sending:
                if len(frames) == 1 and frames[0].first == self.last_sent + 1:
                    self.last_sent = frames[0].last
                    await self.send(text_data=frames[0].text)  # the window's frame, shared by every socket
                else:
                    await self._send([m for f in frames for m in f.events])


def _after(query_string: bytes) -> int:
    from urllib.parse import parse_qs

    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    try:
        return max(0, int(values[0]))
    except ValueError:
        return 0
