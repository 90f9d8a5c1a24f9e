"""The limiter a scorer enters around each judge request when its key has a shared budget.

`async with limiter:` takes, in this order, a place under the run's own `concurrency` (judging's
ConcurrencyLimit), a slot of the key's shared concurrency, and a start time under the key's shared rate; it
gives them back in reverse. It fits judging's `limiter=` seam, so judging never learns where the budget lives.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
import uuid
from typing import Any, Callable

from judging import JudgeError
from studio.key_budget.limits import KeyLimit

log = logging.getLogger(__name__)
# (key variable, "concurrency" | "rate", the limit it waits for): how a run says it waits for the shared budget.
WaitReport = Callable[[str, str, float], None]
POLL_FIRST_S, POLL_MAX_S = 0.02, 0.25  # waiting for a slot: quick at first, then gentle on the store
REPORT_EVERY_S = 10.0  # a run waiting all the time says so this often, not once per request
RATE_WAIT_WORTH_SAYING_S = 1.0  # pacing gaps below this are the rate working, not a run held up


class SharedLimiter:
    def __init__(self, *, key: str, limit: KeyLimit, store: Any, own: Any, on_wait: WaitReport | None = None,
                 blocking: bool = False) -> None:
        self.key, self.limit, self.own = key, limit, own
        self._store = store
        self._on_wait = on_wait
        self._blocking = blocking  # the store talks to a server: its calls run off the event loop
        self._held: dict[Any, Any] = {}  # per task inside `async with`: what it holds
        self._leases: set[Any] = set()
        self._leases_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._reported_at = float("-inf")

    async def __aenter__(self) -> None:
        await self.own.__aenter__()
        held = None
        try:
            if self.limit.concurrency is not None:
                held = await self._take_slot()
                self._keep(held)
            if self.limit.per_minute is not None:
                await self._pace(self.limit.per_minute)
        except BaseException:
            try:
                await self._give_back(held)
            finally:
                await self.own.__aexit__(None, None, None)
            raise
        self._held[asyncio.current_task()] = held

    async def __aexit__(self, *exc: Any) -> None:
        held = self._held.pop(asyncio.current_task(), None)
        try:
            await self._give_back(held)
        finally:
            await self.own.__aexit__(*exc)

    # -- the store's calls -----------------------------------------------------------------------------------
    def _unreachable(self, err: BaseException) -> JudgeError:
        # A run waits for the store as for a judge outage (parked, asked again later) rather than failing, and
        # never sends past its budget. The error's own text may name the store's address: only its type is said.
        said = f"the shared judge budget of {self.key} could not be reached"
        return JudgeError(f"{said} ({type(err).__name__}); check the deployment's Redis", outage=said)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            if not self._blocking:
                return fn(*args, **kwargs)
            return await asyncio.to_thread(fn, *args, **kwargs)
        except self._store.errors as err:
            raise self._unreachable(err) from err

    async def _try_acquire(self, token: str) -> Any:
        kwargs = {"token": token, "limit": self.limit.concurrency, "lease_s": self.limit.lease_s}
        if not self._blocking:
            return await self._call(self._store.try_acquire, self.key, **kwargs)
        future = asyncio.ensure_future(self._call(self._store.try_acquire, self.key, **kwargs))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # Cancelled while the store was answering (a group's failure cancels its siblings): the slot it took,
            # or the place in the queue it kept, is given back when it answers, not left to its lease.
            def settle(done: asyncio.Future[Any]) -> None:
                if done.cancelled() or done.exception() is not None:
                    return
                if done.result() is None:
                    asyncio.ensure_future(asyncio.to_thread(self._abandon, token))
                else:
                    asyncio.ensure_future(self._give_back(done.result()))

            future.add_done_callback(settle)
            raise

    async def _take_slot(self) -> Any:
        token, delay, said = uuid.uuid4().hex, POLL_FIRST_S, False
        try:
            while (held := await self._try_acquire(token)) is None:
                if not said:
                    self._report("concurrency", float(self.limit.concurrency or 0))
                    said = True
                await asyncio.sleep(delay * (0.5 + random.random()))  # jitter: waiters of many runs spread out
                delay = min(POLL_MAX_S, delay * 1.5)
        except JudgeError:
            raise  # the store is out of reach: so is the queue (its place lapses after lease_s)
        except BaseException:
            self._abandon(token)
            raise
        return held

    def _abandon(self, token: str) -> None:
        with contextlib.suppress(*self._store.errors):  # else its place in the queue lapses after lease_s
            self._store.abandon(self.key, token)

    async def _pace(self, per_minute: float) -> None:
        wait = await self._call(self._store.reserve_start, self.key, interval_s=60.0 / per_minute)
        if wait >= RATE_WAIT_WORTH_SAYING_S:
            self._report("rate", per_minute)
        if wait > 0:
            await asyncio.sleep(wait)

    def _keep(self, held: Any) -> None:
        """Renews `held` until it is given back. Redis leases only (file locks last as long as the process), and
        from a thread: an event loop busy for longer than a lease (an import, a tokenizer) must not lose slots."""
        if not self._blocking:
            return
        with self._leases_lock:
            self._leases.add(held)
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_while_held, daemon=True,
                                                 name=f"judge-budget-{self.key}")
                self._renewer.start()

    def _renew_while_held(self) -> None:
        while True:
            time.sleep(self.limit.lease_s / 3)
            with self._leases_lock:
                leases = list(self._leases)
                if not leases:
                    self._renewer = None  # under the lock: the next _keep starts another
                    return
            for held in leases:
                try:
                    kept = self._store.renew(self.key, held, lease_s=self.limit.lease_s)
                except self._store.errors as err:  # the next renewal may get through before the lease runs out
                    log.warning("could not renew a slot of %s's judge budget: %s", self.key, type(err).__name__)
                    continue
                if not kept:
                    log.warning("a slot of %s's judge budget ran out while held (this process stalled longer than "
                                "its lease of %ss); the key may briefly see one request more", self.key,
                                self.limit.lease_s)

    async def _give_back(self, held: Any) -> None:
        if held is None:
            return
        with self._leases_lock:
            self._leases.discard(held)
        try:
            if self._blocking:  # shielded: a second cancel must not leave the slot to its lease
                await asyncio.shield(asyncio.to_thread(self._store.release, self.key, held))
            else:
                self._store.release(self.key, held)
        except self._store.errors as err:  # the lease frees it in lease_s
            log.warning("could not give back a slot of %s's judge budget: %s", self.key, type(err).__name__)

    def _report(self, what: str, limit: float) -> None:
        now = time.monotonic()
        if self._on_wait is None or now - self._reported_at < REPORT_EVERY_S:
            return
        self._reported_at = now
        try:
            self._on_wait(self.key, what, limit)
        except Exception:  # saying so must never stop a request
            log.exception("reporting a wait for %s's judge budget failed", self.key)
