"""The in-process executor: runs and re-scores on threads of this process (the embedded setup), and the reaper
thread a server process starts. An entry point like the Celery tasks: work reaches it by name, through
dispatch.py, where WebappConfig.ready installs it."""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import close_old_connections, connections

from webapp.execution.dispatch import (CHECKPOINT_EVALUATE, CHECKPOINT_EXPORT, DISTILLATION_EXECUTE, MCP_TEST,
                                       NOTIFY_DELIVER, PLAYGROUND_RESCORE, RUN_EXECUTE, SERVER_HOLD, TRY_EXECUTE, TRY_JUDGE,
                                       dispatch_install_local)
from webapp.execution.evaluation import checkpoint_evaluate_execute
from webapp.execution.exports import checkpoint_export_execute
from webapp.execution.mcp_testing import mcp_server_test_execute
from webapp.execution.serving import project_server_hold
from webapp.execution.stopping import stop_at_exit_install
from webapp.execution.trying import try_execute, try_judge
from webapp.execution.runner import runs_execute_in_order
from webapp.models import Run, RunStatus
from webapp.notifications.sending import notification_deliver_until_done
from webapp.models.runs import ACTIVE_STATUSES
from webapp.services.distillation import distillation_execute, distillations_reap_stale
from webapp.services.playground import playground_execute, rescores_reap_stale
from webapp.services.runs import PARKED, run_mark_crashed, runs_reap_stale

log = logging.getLogger(__name__)

# One run at a time, like one GPU worker; queued runs start in launch order (runs_execute_in_order).
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
    global _pool
    if _held:
        return
    with _pool_lock:
        if _pool is None:
            # A server stopped mid-run (SIGTERM, Ctrl-C) would otherwise wait for the run to end, since shutdown
            # joins this pool's thread: the signal makes its engine stop and the run crashed (stopping.py).
            stop_at_exit_install()
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="studio-run")
        _pool.submit(_execute_in_thread, run_id)


# Re-scores wait on the judge API and evaluations load their own model: pools of their own, so neither ever
# queues behind a run (nor a run behind them). wait_idle waits for their futures.
_side_pools: dict[str, ThreadPoolExecutor] = {}
# A project's inference server holds a `serve` thread for as long as it is up (its server is a child process).
_SIDE_WORKERS = {"judge": 2, "eval": 1, "serve": 8, "try": 2, "notify": 2}
_side_pending: set = set()  # futures of the side pools: a no-op submitted there would be no barrier
_serving: set = set()  # the `serve` pool's: a server is up until it idles, so wait_idle does not wait for them


def _submit_side(pool: str, work: Callable[[], object], what: str) -> None:
    with _pool_lock:
        if pool not in _side_pools:
            stop_at_exit_install()  # as for runs: a held project server stops with the process
            _side_pools[pool] = ThreadPoolExecutor(max_workers=_SIDE_WORKERS[pool],
                                                   thread_name_prefix=f"studio-{pool}")
        future = _side_pools[pool].submit(_side_work, work, what)
        pending = _serving if pool == "serve" else _side_pending
        pending.add(future)
    future.add_done_callback(pending.discard)


def _side_work(work: Callable[[], object], what: str) -> None:
    close_old_connections()
    try:
        work()
    except Exception:
        log.exception("%s failed", what)
    finally:
        connections.close_all()


def submit_rescore(rescore_id: int) -> None:
    _submit_side("judge", lambda: playground_execute(rescore_id=rescore_id), f"playground re-score {rescore_id}")


def submit_evaluation(checkpoint_id: int) -> None:
    _submit_side("eval", lambda: checkpoint_evaluate_execute(checkpoint_id=checkpoint_id),
                 f"the evaluation of checkpoint {checkpoint_id}")


def submit_distillation(distillation_id: int) -> None:
    _submit_side("judge", lambda: distillation_execute(distillation_id=distillation_id),
                 f"distillation {distillation_id}")


def _run_local(name: str, object_id: int) -> None:
    if name == RUN_EXECUTE:
        submit(object_id)
    elif name == DISTILLATION_EXECUTE:
        submit_distillation(object_id)
    elif name == CHECKPOINT_EXPORT:
        _submit_side("eval", lambda: checkpoint_export_execute(export_id=object_id), f"model export {object_id}")
    elif name == SERVER_HOLD:
        _submit_side("serve", lambda: project_server_hold(server_id=object_id, worker=f"inprocess@{worker_name()}"),
                     f"project server {object_id}")
    elif name == TRY_EXECUTE:
        _submit_side("try", lambda: try_execute(session_id=object_id), f"Try it session {object_id}")
    elif name == TRY_JUDGE:
        _submit_side("judge", lambda: try_judge(session_id=object_id), f"judging Try it session {object_id}")
    elif name == MCP_TEST:  # a child process of this executor's thread runs the server, never this process
        _submit_side("judge", lambda: mcp_server_test_execute(server_id=object_id), f"MCP test of server {object_id}")
    elif name == NOTIFY_DELIVER:  # its retries wait on this thread, never on a run's
        _submit_side("notify", lambda: notification_deliver_until_done(delivery_id=object_id),
                     f"notification delivery {object_id}")
    elif name == PLAYGROUND_RESCORE:
        submit_rescore(object_id)
    elif name == CHECKPOINT_EVALUATE:
        submit_evaluation(object_id)
    else:
        raise ValueError(f"the in-process executor runs no task {name!r}")


def executor_install() -> None:
    """Makes this module the executor of work dispatched while STUDIO_EXECUTOR is `inprocess`."""
    dispatch_install_local(executor=_run_local)


def _execute_in_thread(run_id: int) -> None:
    """Woken by `run_id`'s submission: runs every queued run in launch order (see runs_execute_in_order)."""
    close_old_connections()
    try:
        runs_execute_in_order(worker=f"inprocess@{worker_name()}")
    except Exception:
        log.exception("run %s: the in-process executor failed", run_id)
    finally:
        connections.close_all()  # this thread's connections only: a long-idle pool thread must not hold one


def wait_idle(timeout: float | None = None) -> None:
    """Blocks until every submitted in-process run has finished (tests, the demo command)."""
    with _pool_lock:
        pool, pending = _pool, list(_side_pending)
    if pool is not None:
        pool.submit(lambda: None).result(timeout=timeout)
    for future in pending:
        future.result(timeout=timeout)


def wait_servers_stopped(timeout: float | None = None) -> None:
    """Blocks until every project server this process holds has stopped (stop them first: tests)."""
    with _pool_lock:
        pending = list(_serving)
    for future in pending:
        future.result(timeout=timeout)


# The programs that serve the ASGI app; `runserver` counts in the process that serves (not its autoreloader).
SERVER_PROGRAMS = ("daphne", "uvicorn", "hypercorn", "gunicorn")


def is_server_process(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> bool:
    """True in a process started to serve the app (daphne, uvicorn, …, or manage.py runserver), false in a
    shell, a management command, a test or a Celery worker, which must never adopt or crash-mark runs."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if not argv:
        return False
    program = Path(argv[0])
    if program.name in SERVER_PROGRAMS or (program.name == "__main__.py" and program.parent.name in SERVER_PROGRAMS):
        return True
    return "runserver" in argv[1:2] and (environ.get("RUN_MAIN") == "true" or "--noreload" in argv)


_started = False


def embedded_startup() -> None:
    """In the embedded setup nothing else owns runs: active ones are orphans of a previous process (crashed)
    and queued ones are re-submitted. A reaper thread keeps marking stale runs, as Celery beat does.
    Called by WebappConfig.ready in a server process; runs once per process."""
    global _started
    with _pool_lock:
        if _started or settings.STUDIO_EXECUTOR != "inprocess":
            return
        _started = True

    def _start() -> None:
        try:
            orphans = Run.objects.filter(status__in=ACTIVE_STATUSES).exclude(worker=PARKED)
            for run_id in orphans.values_list("id", flat=True):  # a parked run has no engine to lose
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
                distillations_reap_stale()
            except Exception:
                log.exception("reaping stale runs failed")
            finally:
                close_old_connections()

    threading.Thread(target=_start, daemon=True, name="studio-reaper").start()
