"""The in-process executor's stop signal: set once the interpreter of a process that runs work on its own threads
(the embedded setup's server, executors.py) begins to shut down, read by the supervision loops that already poll
(runner.py's engine pump, serving.py's server hold), which then stop their child process and say why on its row.
Never set in a Celery worker: its pool processes own their runs, and the worker's own shutdown handles them.
Imports only the standard library, so both loops can read it whichever process they run in."""
from __future__ import annotations

import threading

_stopping = threading.Event()
_installed = False
_lock = threading.Lock()


def process_stopping() -> bool:
    """True once this process's interpreter is shutting down (only where stop_at_exit_install was called)."""
    return _stopping.is_set()


def stop_at_exit_install() -> None:
    """Sets the signal when the interpreter starts shutting down; once per process.

    threading's own exit hook, not `atexit`: interpreter shutdown joins every non-daemon thread (the executor's
    pools are such threads; concurrent.futures joins them from a threading exit hook of its own) before `atexit`
    functions run, so an `atexit` callback would run only after the run had ended. threading calls these hooks in
    reverse order of registration, and concurrent.futures registered its hook when it was imported (before this),
    so this one runs first and the loops see the signal while their threads are being joined."""
    global _installed
    with _lock:
        if _installed:
            return
        threading._register_atexit(_stopping.set)  # type: ignore[attr-defined]  # CPython's, since 3.9
        _installed = True
