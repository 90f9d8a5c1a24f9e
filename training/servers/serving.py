"""How our own inference server listens: uvicorn with limits, and who may reach it.

- Bind: 127.0.0.1 (any loopback address) unless the deployment gives the server a token in $STUDIO_INFERENCE_TOKEN;
  then it may listen anywhere, and every request must carry `Authorization: Bearer <token>`. Without one, a
  non-loopback host is refused before the model loads (`bind_refusal`).
- Limits (`Limits`, every one a command-line flag of `python -m training.servers.local`): the request head must be
  complete within `header_timeout_s` of the connection asking for a request (a connection that sends a few
  bytes and stops is closed, where uvicorn alone would wait for ever); the body within `body_timeout_s` (408) and
  at most `max_body_bytes` (413, refused from its Content-Length before a byte is read, or as soon as a
  streamed body passes it); an idle kept-alive connection is closed after `keep_alive_s`; beyond
  `max_connections` open connections a request is answered 503. Connections are sockets on one event loop, not
  threads: a hundred half-open ones cost a few kilobytes each.
"""
from __future__ import annotations

import asyncio
import ipaddress
import os
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TOKEN_ENV = "STUDIO_INFERENCE_TOKEN"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("localhost",)


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    header_timeout_s: float = Field(10.0, gt=0, description="From a connection's wait for a request to a "
                                    "complete request head; longer, it is closed.")
    body_timeout_s: float = Field(30.0, gt=0, description="To read a request's whole body (408 after).")
    keep_alive_s: int = Field(5, ge=1, description="An idle kept-alive connection is closed after this (vLLM: 5).")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Largest request body (413 above).")
    max_header_bytes: int = Field(16 * 1024, ge=1024, description="Largest request head (400 above).")
    max_connections: int = Field(1024, ge=1, description="Open connections and requests in flight; a request "
                                 "beyond them is answered 503.")


def inference_token() -> str | None:
    """The deployment's token for the inference servers it starts, or None."""
    return os.environ.get(TOKEN_ENV) or None


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def bind_refusal(host: str, token: str | None) -> str | None:
    """Why the server must not listen on `host` with `token`, or None."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        return f"${TOKEN_ENV} is shorter than {MIN_TOKEN_CHARS} characters; use a long random value"
    if token is None and not is_loopback(host):
        return (f"the inference server would listen on {host!r} without authentication: anyone who reaches that "
                f"address could sample from the model and load adapters from any path. Listen on 127.0.0.1, or set "
                f"${TOKEN_ENV} (a long random value) in the environment of the server and of whatever calls it "
                f"(the web app sends it as a Bearer token)")
    return None


def _header_timeout_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request head is not complete in time."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            # uvicorn cancels its keep-alive timer on any byte, so a trickle would hold the connection for ever;
            # this timer ends only with a whole request head.
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # waiting for the next request on this connection

    return HeaderTimeoutProtocol


def uvicorn_server(app: Any, host: str, port: int, limits: Limits) -> Any:
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, http=_header_timeout_protocol(limits.header_timeout_s), ws="none",
        lifespan="off", loop="asyncio", backlog=2048, limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s, h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=2, proxy_headers=False, server_header=False, access_log=False,
        log_level="warning",
    )
    return uvicorn.Server(config)


def serve(app: Any, host: str, port: int, limits: Limits) -> None:
    """Serves `app` until SIGTERM or SIGINT (uvicorn's handlers), on this thread."""
    uvicorn_server(app, host, port, limits).run()


def serve_in_thread(app: Any, host: str, limits: Limits, *,
                    name: str = "inference-http") -> tuple[int, Callable[[], None]]:
    """(port, stop) of `app` served on a free port of `host` by a daemon thread of this process (uvicorn leaves
    the process's signal handlers alone off the main thread)."""
    server = uvicorn_server(app, host, 0, limits)
    thread = threading.Thread(target=server.run, daemon=True, name=name)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise OSError(f"the inference server's HTTP front could not listen on {host}")
        threading.Event().wait(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return port, stop
