"""httpx transports that check every request's host against the egress policy and connect to the address they
checked (DNS pinned): the Host header and TLS (SNI and certificate checks) keep the URL's name, so a name that
passed a check cannot be rebound to another address before the connection, and a redirect is checked like the
first request. Use `async_client()` / `sync_client()` for outbound calls to addresses a project gave.

A refused request raises EgressRefused before any connection is made. The wrappers are duck-typed on the inner
transport, so the MCP SDK's httpx fork is pinned the same way (`PinnedAsyncTransport(inner=...)`).
"""
from __future__ import annotations

import asyncio
import ipaddress
import threading
from typing import Any, Callable

import httpx

from egress.policy import EgressUnresolvable, Policy, check_host, current_policy


def _default_port(url: Any) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _pin(request: Any, address: str) -> str:
    """Points `request` at `address`, keeping the name for TLS; returns the name (the pool key)."""
    host = request.url.host
    if request.url.scheme == "https" and not _is_address(host):
        request.extensions = {**request.extensions, "sni_hostname": host}
    request.url = request.url.copy_with(host=address)
    return host


class _Pool:
    """One inner transport per host name: a TLS connection made for one name is never reused for another name
    that happens to resolve to the same address."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._inners, self._lock = make, {}, threading.Lock()

    def get(self, host: str) -> Any:
        with self._lock:
            if host not in self._inners:
                self._inners[host] = self._make()
            return self._inners[host]

    def all(self) -> list[Any]:
        with self._lock:
            inners, self._inners = list(self._inners.values()), {}
        return inners


class PinnedTransport(httpx.BaseTransport):
    def __init__(self, policy: Policy | None = None, *, inner: Callable[[], Any] | None = None,
                 **transport_options: Any) -> None:
        self._policy = policy  # None: the process's policy at each request (egress.current_policy)
        self._pool = _Pool(inner or (lambda: httpx.HTTPTransport(**transport_options)))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        policy = self._policy or current_policy()
        try:
            address = check_host(request.url.host, _default_port(request.url), policy)[0]
        except EgressUnresolvable as err:  # a name that does not resolve is a failed connection, as without us
            raise httpx.ConnectError(str(err), request=request) from None
        host = _pin(request, str(address))
        return self._pool.get(host).handle_request(request)

    def close(self) -> None:
        for inner in self._pool.all():
            inner.close()


class PinnedAsyncTransport(httpx.AsyncBaseTransport):
    def __init__(self, policy: Policy | None = None, *, inner: Callable[[], Any] | None = None,
                 **transport_options: Any) -> None:
        self._policy = policy
        self._pool = _Pool(inner or (lambda: httpx.AsyncHTTPTransport(**transport_options)))

    async def handle_async_request(self, request: Any) -> Any:
        policy = self._policy or current_policy()
        host, port = request.url.host, _default_port(request.url)
        try:
            if _is_address(host):
                addresses = check_host(host, port, policy)
            else:  # a DNS lookup blocks: off the event loop
                addresses = await asyncio.get_running_loop().run_in_executor(None, check_host, host, port, policy)
        except EgressUnresolvable as err:
            raise httpx.ConnectError(str(err), request=request) from None
        host = _pin(request, str(addresses[0]))
        return await self._pool.get(host).handle_async_request(request)

    async def aclose(self) -> None:
        for inner in self._pool.all():
            await inner.aclose()


def async_client(policy: Policy | None = None, **client_options: Any) -> httpx.AsyncClient:
    """An httpx.AsyncClient whose every request passes the egress policy (environment proxies are not used: the
    connection goes to the checked address)."""
    return httpx.AsyncClient(transport=PinnedAsyncTransport(policy), **client_options)


def sync_client(policy: Policy | None = None, **client_options: Any) -> httpx.Client:
    return httpx.Client(transport=PinnedTransport(policy), **client_options)
