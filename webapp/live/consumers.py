"""The run page's websocket: authenticate, check membership, replay what the page missed, then stream.

Client: connect to /ws/runs/<id>/?after=<last seq the page has>; every message is {"seq", "kind", "data"},
in seq order with no duplicates. A user who is not a member of the run's project is refused at the handshake,
exactly like an unknown run (the 404 of the pages and the API). Membership is checked again while the socket
is open: when the project's members change (and at least every RECHECK_S while events flow), and a user who
has lost access is disconnected with code 4403.
"""
from __future__ import annotations

import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.selectors import access, runs as run_selectors
from webapp.live.publish import project_group, run_group

REPLAY_BATCH = 2000
RECHECK_S = 30.0  # a missed access.changed message (Redis blip) keeps a removed user at most this long


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
        # Join the group before reading the backlog: an event committed in between arrives twice at worst,
        # and `last_sent` drops the duplicate; joining after would lose it.
        await self.channel_layer.group_add(project_group(self.project_id), self.channel_name)
        await self.channel_layer.group_add(run_group(self.run_id), self.channel_name)
        await self.accept()
        await self._replay()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "last_sent"):
            await self.channel_layer.group_discard(run_group(self.run_id), self.channel_name)
            await self.channel_layer.group_discard(project_group(self.project_id), self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        # A client that detects a gap (e.g. after sleeping) asks for a replay from what it has.
        if isinstance(content, dict) and isinstance(content.get("after"), int):
            self.last_sent = min(self.last_sent, max(0, content["after"]))
            await self._replay()

    async def _replay(self) -> None:
        while True:
            events = await database_sync_to_async(run_selectors.run_events_after)(
                run_id=self.run_id, after=self.last_sent, limit=REPLAY_BATCH)
            for message in events:
                await self._send(message)
            if len(events) < REPLAY_BATCH:
                return

    async def _send(self, message: dict) -> None:
        if message["seq"] <= self.last_sent:
            return
        self.last_sent = message["seq"]
        await self.send_json({"seq": message["seq"], "kind": message["kind"], "data": message["data"]})

    async def access_changed(self, message: dict) -> None:
        await self._still_allowed()

    async def _still_allowed(self) -> bool:
        self.checked_at = time.monotonic()
        if await database_sync_to_async(access.run_visible)(user=self.scope["user"], run_id=self.run_id):
            return True
        await self.close(code=4403)
        return False

    async def run_event(self, message: dict) -> None:
        if time.monotonic() - self.checked_at > RECHECK_S and not await self._still_allowed():
            return
        if message["seq"] > self.last_sent + 1:
            await self._replay()  # a message was dropped in transit (full channel): fill the gap from the DB
        await self._send(message)


def _after(query_string: bytes) -> int:
    from urllib.parse import parse_qs

    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    try:
        return max(0, int(values[0]))
    except ValueError:
        return 0
