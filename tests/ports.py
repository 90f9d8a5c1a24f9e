"""The tests' one free-port helper and one readiness wait (DESIGN §7), free of Django so that tests/training,
tests/judging and tests/webapp all use them.

- `free_port()`: a loopback port nobody listens on now, for a server that must be told its port.
- `closed_port()`: a loopback port where a connection is refused at once for as long as this process lives, for an
  address that must lead nowhere (a judge, MCP server or webhook that is down).
- `wait_for(predicate)`: polls until the predicate returns something true, and returns it; on a timeout the error
  says what was waited for and, through `explain`, the state of the thing.
- `wait_listening(port, proc=..., log=...)`: returns once that process itself listens on the port (port 0: on any
  port, which it returns); fails at once, with the log's tail, when the process has exited.
"""
from __future__ import annotations

import functools
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def _held_closed() -> socket.socket:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    return held


def closed_port() -> int:
    """This process holds the port bound and never listens on it: a connection is refused (no network, no hang),
    and no server started later, by this test or another worker, can bind it, which a port found free and let go
    (`free_port()`) could not promise. One port serves every caller in the process."""
    return _held_closed().getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def listening_ports(proc: subprocess.Popen) -> set[int]:
    """The TCP ports `proc` itself listens on (not whoever else holds a port: another worker's server)."""
    try:
        connections = psutil.Process(proc.pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return set()
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1, message: str = "condition",
             explain: Callable[[], str] | None = None) -> Any:
    """`explain`, when given, is called on a timeout: what it returns (the state of the thing waited for) is
    added to the error, so a failure on CI says why, not only what."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}"
                         + (f"\n{explain()}" if explain else ""))


def wait_listening(port: int, *, proc: subprocess.Popen | None = None, log: Path | None = None,
                   timeout: float = 60, what: str = "the server") -> int:
    """Returns once `proc` listens on `port` (any port for 0), and returns that port. Fails at once, with the
    log's tail, when `proc` exits first. Without `proc`: once anything accepts on `port`. A connect alone would
    count another process that holds the port as ours (a free port handed out twice); so a process's own
    listening sockets are what count."""

    def up() -> int | None:
        if proc is None:
            return port if listening(port) else None
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode} before listening on {port or 'a port'}"
                                 + (f":\n{log.read_text(errors='replace')[-3000:]}" if log else ""))
        ports = listening_ports(proc)
        return (port if port in ports else None) if port else min(ports, default=None)

    return wait_for(up, timeout=timeout, interval=0.1, message=f"{what} to listen on {port or 'a port'}",
                    explain=(lambda: log.read_text(errors="replace")[-3000:]) if log else None)
