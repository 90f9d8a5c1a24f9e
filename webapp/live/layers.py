"""The embedded channel layer: channels' in-memory layer, made safe to call from the executor's thread.

The in-memory layer's queues belong to the server's event loop. The embedded executor publishes from its own
thread (through async_to_sync, i.e. another loop), which would touch those queues from the wrong loop and
leave a consumer asleep; here such calls are handed to the loop that owns the consumers.
"""
from __future__ import annotations

import asyncio

from channels.layers import InMemoryChannelLayer


class ThreadSafeInMemoryChannelLayer(InMemoryChannelLayer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._owner_loop: asyncio.AbstractEventLoop | None = None

    def _remember_loop(self) -> None:
        self._owner_loop = asyncio.get_running_loop()

    def _foreign_loop(self) -> asyncio.AbstractEventLoop | None:
        owner = self._owner_loop
        if owner is None or owner.is_closed() or not owner.is_running():
            return None
        return owner if owner is not asyncio.get_running_loop() else None

    async def receive(self, channel):
        self._remember_loop()
        return await super().receive(channel)

    async def group_add(self, group, channel):
        self._remember_loop()
        return await super().group_add(group, channel)

    async def send(self, channel, message):
        owner = self._foreign_loop()
        if owner is not None:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(super().send(channel, message), owner))
        return await super().send(channel, message)

    async def group_send(self, group, message):
        owner = self._foreign_loop()
        if owner is not None:
            future = asyncio.run_coroutine_threadsafe(super().group_send(group, message), owner)
            return await asyncio.wrap_future(future)
        return await super().group_send(group, message)
