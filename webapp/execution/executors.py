"""Where `run_execute` is called: a Celery worker on queue `gpu`, or a thread of this process (embedded)."""
from __future__ import annotations

import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

log = logging.getLogger(__name__)

# One run at a time, like one GPU worker; later launches wait in the queue in order.
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_held = False


def hold_submissions() -> None:
    """Leaves new in-process runs queued, for a server process started next to pick up (the demo's --serve)."""
    global _held
    _held = True


def submit(run_id: int) -> None:
    if settings.STUDIO_EXECUTOR == "celery":
        from webapp.tasks import run_execute_task

        run_execute_task.apply_async(args=[run_id], queue="gpu")
        return
    global _pool
    if _held:
        return
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="studio-run")
        _pool.submit(_execute_in_thread, run_id)


# Playground re-scores wait on the judge API, not the GPU: their own pool, so they never queue behind a run.
_judge_pool: ThreadPoolExecutor | None = None
_judge_pending: set = set()  # futures of the judge pool: it has two threads, so a no-op is no barrier there


def submit_rescore(rescore_id: int) -> None:
    """Celery queue `judge`, or the in-process judge pool (embedded): the same service either way."""
    if settings.STUDIO_EXECUTOR == "celery":
        from webapp.tasks import playground_rescore_task

        playground_rescore_task.apply_async(args=[rescore_id], queue="judge")
        return
    global _judge_pool
    with _pool_lock:
        if _judge_pool is None:
            _judge_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="studio-judge")
        future = _judge_pool.submit(_rescore_in_thread, rescore_id)
        _judge_pending.add(future)
    future.add_done_callback(_judge_pending.discard)


def _rescore_in_thread(rescore_id: int) -> None:
    from django.db import close_old_connections, connections

    from webapp.services.playground import playground_execute

    close_old_connections()
    try:
        playground_execute(rescore_id=rescore_id)
    except Exception:
        log.exception("playground re-score %s failed", rescore_id)
    finally:
        connections.close_all()


def _execute_in_thread(run_id: int) -> None:
    from django.db import close_old_connections, connections

    from webapp.execution.runner import run_execute

    close_old_connections()
    try:
        run_execute(run_id=run_id, worker=f"inprocess@{worker_name()}")
    except Exception:
        log.exception("run %s: the in-process executor failed", run_id)
    finally:
        connections.close_all()  # this thread's connections only: a long-idle pool thread must not hold one


def wait_idle(timeout: float | None = None) -> None:
    """Blocks until every submitted in-process run has finished (tests, the demo command)."""
    with _pool_lock:
        pool, pending = _pool, list(_judge_pending)
    if pool is not None:
        pool.submit(lambda: None).result(timeout=timeout)
    for future in pending:
        future.result(timeout=timeout)


def embedded_startup() -> None:
    """In the embedded setup nothing else owns runs: active ones are orphans of a previous process (crashed)
    and queued ones are re-submitted. A reaper thread keeps marking stale runs, as Celery beat does."""
    if settings.STUDIO_EXECUTOR != "inprocess":
        return

    def _start() -> None:
        from django.db import close_old_connections

        from webapp.models import Run, RunStatus
        from webapp.models.runs import ACTIVE_STATUSES
        from webapp.services.playground import rescores_reap_stale
        from webapp.services.runs import run_mark_crashed, runs_reap_stale

        try:
            for run_id in Run.objects.filter(status__in=ACTIVE_STATUSES).values_list("id", flat=True):
                run_mark_crashed(run_id=run_id, reason="the server restarted during the run; "
                                                      "resume to continue from the last checkpoint")
            for run_id in Run.objects.filter(status=RunStatus.QUEUED).order_by("id").values_list("id", flat=True):
                submit(run_id)
        finally:
            close_old_connections()
        while True:
            threading.Event().wait(settings.STUDIO_STALE_AFTER_S / 2)
            try:
                runs_reap_stale()
                rescores_reap_stale()
            except Exception:
                log.exception("reaping stale runs failed")
            finally:
                close_old_connections()

    threading.Thread(target=_start, daemon=True, name="studio-reaper").start()
