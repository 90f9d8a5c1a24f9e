"""The local inference server as its own process, for tests that speak to it over raw sockets as any client could:
started as `python -m training.servers.local` with the flags and environment a test gives, and stopped after."""
from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from training.servers import InferenceServer, free_port, spawn


def start_local_server(model_dir: Path, log_path: Path, *flags: str, host: str = "127.0.0.1",
                       token: str | None = None) -> InferenceServer:
    """A started server (its `process.pid` is the server's); `token` goes in its environment, as a deployment
    gives it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "STUDIO_INFERENCE_TOKEN"}
    if token:
        env["STUDIO_INFERENCE_TOKEN"] = token
    command = [sys.executable, "-m", "training.servers.local", "--model", str(model_dir), "--served-model-name",
               "base", "--host", host, "--port", str(port), "--threads", "1", *flags]
    server = InferenceServer(f"http://127.0.0.1:{port}/v1", "base", spawn(command, env, log_path), log_path,
                             token=token)
    server.wait_ready(120)
    return server


def server_threads(server: InferenceServer) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/task"))


def server_rss_bytes(server: InferenceServer) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def connect(server: InferenceServer) -> socket.socket:
    host, port = server.root_url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    """Whether the server ends the connection within `within_s` (an answer it writes first is read and dropped)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except ConnectionError:
            return True
    return False


def read_response(sock: socket.socket, timeout_s: float = 10) -> tuple[int, bytes]:
    """(status, raw bytes) of the answer on `sock`, read until the head and Content-Length bytes of body."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1."):
        raise AssertionError(f"no HTTP answer: {data[:200]!r}")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head.split()[1]), head + b"\r\n\r\n" + body
