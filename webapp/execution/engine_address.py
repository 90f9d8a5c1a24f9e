"""Where a run's endpoint may forward an external agent's calls (issue 43; docs/security.md "The run's endpoint").

The engine announces its inference server's address in its `rollouts_wanted` event. That line is only what the
engine process printed, so the worker records it on the run (Run.external_base_url, the one address the
endpoint ever sends to; webapp/services/external_proxy.py) only when it is the server this worker's own settings
put there: the run's `server.url` for a deployment's external server, else an HTTP `/v1` on this worker's
engine host (the run's `server.host`, loopback by default, or STUDIO_ENGINE_HOST; a wildcard host is this
machine's name, as the engine announces it). Any other address (another host, a cloud metadata address,
credentials in the URL) is never recorded, and the run's endpoint answers that it is not serving.

Runs on the worker, which reads the engine's events: the web process need not share STUDIO_ENGINE_HOST.
"""
from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def engine_server_host(config: dict[str, Any]) -> str:
    """The host this worker starts the run's server on (runner._engine_config applies the same rule)."""
    server = config.get("server") or {}
    if settings.STUDIO_ENGINE_HOST and (config.get("environment") or {}).get("kind") == "external":
        return settings.STUDIO_ENGINE_HOST
    return str(server.get("host") or "127.0.0.1")


def engine_address_problem(*, config: dict[str, Any], base_url: str) -> str | None:
    """Why `base_url` is not where this run's inference server is, or None when it is."""
    try:
        url = urlsplit(base_url)
        port = url.port
    except ValueError:
        return f"{base_url[:100]!r} is not a URL"
    if url.scheme not in ("http", "https") or not url.hostname or url.username or url.password \
            or url.query or url.fragment:
        return f"{base_url[:100]!r} is not a plain http(s) address"
    server = config.get("server") or {}
    if server.get("kind") == "external":  # the deployment's own server: that address and no other
        want = urlsplit(str(server.get("url") or ""))
        same = (url.scheme, url.hostname, url.port) == (want.scheme, want.hostname, want.port)
        if not same or url.path.rstrip("/") != want.path.rstrip("/"):
            return f"{url.hostname} is not the deployment's inference server (the run's server.url)"
        return None
    host = engine_server_host(config)
    allowed = {socket.gethostname().lower()} if host in WILDCARDS else \
        (set(LOOPBACK) if host in LOOPBACK else {host.lower().strip("[]")})
    if url.hostname not in allowed:
        return (f"{url.hostname} is not this worker's inference server host "
                f"({', '.join(sorted(allowed))}; the run's server.host or STUDIO_ENGINE_HOST)")
    if port is None or url.path.rstrip("/") != "/v1":
        return f"{base_url[:100]!r} is not an inference server's /v1 on a port"
    return None
