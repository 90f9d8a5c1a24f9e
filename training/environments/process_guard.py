"""Keeps this process's environment and memory from the programs it starts (stdio MCP servers, a user's tools).

A process's environment is readable at /proc/PID/environ by any process of the same user, and holds what this
one was started with (a database URL, the secret and encryption keys, a judge's or an MCP server's key). A
process marked not dumpable (prctl PR_SET_DUMPABLE 0) has its /proc files owned by root and refuses ptrace, so
another process of its user (a stdio MCP server started by a worker) can read neither. Linux only; elsewhere a
no-op. The mark is inherited by fork and cleared by exec, so each Python process that holds secrets sets it
itself: the web app and its workers (WebappConfig.ready), the engine's child, the connection-test child.
"""
from __future__ import annotations

import ctypes
import sys

PR_SET_DUMPABLE = 4


def hide_environment() -> bool:
    """Marks this process not dumpable; True when it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
