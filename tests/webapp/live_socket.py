"""The run page's websocket as tests read it: a real client of the consumer (channels' communicator) whose
frames are JSON arrays of events; `receive_json_from` hands out one event at a time, `receive_frame` a whole
frame, and `receive_nothing` is true only when no event is left unread either."""
from __future__ import annotations

from typing import Any

from channels.testing import WebsocketCommunicator

from webapp.asgi import application


class LiveSocket(WebsocketCommunicator):
    def __init__(self, path: str, user: Any = None) -> None:
        super().__init__(application, path, headers=[(b"host", b"localhost"), (b"origin", b"http://localhost")])
        if user is not None:
            self.scope["user"] = user
        self.unread: list[dict[str, Any]] = []

    async def receive_frame(self, timeout: float = 1) -> list[dict[str, Any]]:
        assert not self.unread, f"events of an earlier frame are still unread: {self.unread}"
        frame = await super().receive_json_from(timeout=timeout)
        assert isinstance(frame, list) and frame, f"a frame is a non-empty array of events, got {frame!r}"
        return frame

    async def receive_json_from(self, timeout: float = 1) -> dict[str, Any]:
        if not self.unread:
            self.unread = await self.receive_frame(timeout=timeout)
        return self.unread.pop(0)

    async def receive_nothing(self, timeout: float = 0.1, interval: float = 0.01) -> bool:
        return not self.unread and await super().receive_nothing(timeout=timeout, interval=interval)


def run_socket(user: Any, run_id: int, after: int = 0) -> LiveSocket:
    return LiveSocket(f"/ws/runs/{run_id}/?after={after}", user)
