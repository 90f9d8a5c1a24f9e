"""The shared budget on one machine (the embedded default, no Redis): file locks under the deployment's var dir.

Slots are files `slot-0 … slot-(n-1)` in a folder per key; holding a slot is holding an exclusive flock on its
file. The kernel drops a process's locks when it dies, however it dies, so a killed holder frees its slot at
once; nothing needs renewing. flock (not fcntl's record locks) because two descriptors of one process conflict
too, so coroutines of one run are counted like other runs. Waiters queue first come, first served. Pacing: the
next allowed start in a file, read and moved under a short exclusive lock.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator


class FileStore:
    def __init__(self, directory: str) -> None:
        self._root = Path(directory)

    def _folder(self, name: str) -> Path:
        folder = self._root / name  # `name` is a checked key variable name (limits.KEY_NAME): no path parts
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder

    def try_acquire(self, name: str, *, token: str, limit: int, lease_s: float) -> Any:
        """The descriptor holding a free slot's lock when no earlier waiter is owed it, else None (and `token`
        waits in the queue). The queue is a small JSON file read and written under its own lock; a waiter
        whose process is gone, or that stopped asking for lease_s, leaves it."""
        folder = self._folder(name)
        with _locked(folder / "queue") as fd:
            now, raw = time.time(), os.pread(fd, 1 << 20, 0)
            queue = [e for e in (json.loads(raw) if raw else [])
                     if e[0] == token or (_running(e[1]) and now - e[2] < lease_s)]
            entry = next((e for e in queue if e[0] == token), None)
            if entry is None:
                queue.append(entry := [token, os.getpid(), now])
            entry[2] = now
            held = _slot(folder, limit, free_at_least=queue.index(entry) + 1)
            if held is not None:
                queue.remove(entry)
            _rewrite(fd, json.dumps(queue))
        return held

    def abandon(self, name: str, token: str) -> None:
        """A waiter that stops waiting (cancelled) leaves the queue at once."""
        with _locked(self._folder(name) / "queue") as fd:
            raw = os.pread(fd, 1 << 20, 0)
            _rewrite(fd, json.dumps([e for e in (json.loads(raw) if raw else []) if e[0] != token]))

    def renew(self, name: str, held: Any, *, lease_s: float) -> bool:
        return True  # a lock lasts as long as its holder's process

    def release(self, name: str, held: Any) -> None:
        os.close(held)  # closing the only descriptor of the open file drops its lock

    def reserve_start(self, name: str, *, interval_s: float) -> float:
        with _locked(self._folder(name) / "next-start") as fd:  # held for a read and a write: microseconds
            raw = os.pread(fd, 64, 0).decode().strip()
            now = time.time()  # one machine, one clock
            start = max(now, float(raw) if raw else 0.0)
            _rewrite(fd, f"{start + interval_s:.6f}")
            return start - now

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        return (OSError,)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _rewrite(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _slot(folder: Path, limit: int, *, free_at_least: int) -> int | None:
    """A locked slot's descriptor when at least `free_at_least` slots are free, else None (called under the
    queue's lock, so no other taker looks at the slots meanwhile)."""
    taken: list[int] = []
    for index in range(limit):
        fd = os.open(folder / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        taken.append(fd)
        if len(taken) >= free_at_least:
            break
    if len(taken) < free_at_least:
        for fd in taken:
            os.close(fd)
        return None
    for fd in taken[1:]:
        os.close(fd)
    return taken[0]
