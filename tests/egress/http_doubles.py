"""Local HTTP servers for the egress tests: one that counts what reaches it (standing in for a cloud metadata
endpoint, or any address the policy refuses), with a scripted status, body and Location."""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

METADATA_REPLY = b'{"Code": "Success", "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG"}'


class CountingServer:
    """Answers every request with `status` and `body` (and `location`, for a redirect); records each request's
    path and Host header."""

    def __init__(self, *, status: int = 200, body: bytes = METADATA_REPLY, location: str | None = None,
                 address: str = "127.0.0.1") -> None:
        self.requests: list[dict[str, str]] = []
        self.status, self.body, self.location = status, body, location
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                server.requests.append({"path": self.path, "host": self.headers.get("host", "")})
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(server.status)
                if server.location:
                    self.send_header("location", server.location)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((address, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{address}:{self.port}"

    def __enter__(self) -> "CountingServer":
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def rebinding_resolver(name: str, answers: list[str]) -> Callable[..., Any]:
    """A stand-in for socket.getaddrinfo (the resolver: outside our code) where `name` answers each address of
    `answers` in turn (the last one from then on), as a DNS server rebinding a name does; other names resolve
    for real."""
    real, given = socket.getaddrinfo, list(answers)

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == name:
            address = given.pop(0) if len(given) > 1 else given[0]
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (address, int(port or 0)))]
        return real(host, port, *args, **kwargs)

    return resolve
