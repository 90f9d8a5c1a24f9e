"""Hands work to whatever executes it, by task name: a Celery queue, or the in-process executor of this process.

A leaf of the web app: services call it, and it imports no service, runner or task, so work flows one way
(entry points > services > dispatch > models; pyproject's import-linter contract). The in-process executor
(executors.py, an entry point) installs itself here at app start instead of being imported.
"""
from __future__ import annotations

import threading
from typing import Callable

from django.conf import settings

from webapp.celery_app import app

RUN_EXECUTE = "webapp.tasks.run_execute_task"
PLAYGROUND_RESCORE = "webapp.tasks.playground_rescore_task"
CHECKPOINT_EVALUATE = "webapp.tasks.run_evaluate_task"  # it loads the model: a GPU worker's job
DISTILLATION_EXECUTE = "webapp.tasks.distillation_task"  # a teacher's and a judge's API calls: no GPU
# Serving (issue 37): a task that holds a project's inference server until it idles, and Try it's rollouts and
# judging (HTTP clients of that server and of the judge, with the agent's tools: never in the web process).
SERVER_HOLD = "webapp.tasks.project_server_hold_task"
TRY_EXECUTE = "webapp.tasks.try_execute_task"
TRY_JUDGE = "webapp.tasks.try_judge_task"
CHECKPOINT_EXPORT = "webapp.tasks.checkpoint_export_task"  # loads the base model: a GPU worker's job
# An MCP server's Test connection: the server starts (stdio) or is reached (HTTP) from a worker's child process.
MCP_TEST = "webapp.tasks.mcp_server_test_task"
NOTIFY_DELIVER = "webapp.tasks.notification_deliver_task"  # an e-mail or a webhook POST (webapp/notifications/)
QUEUES = {RUN_EXECUTE: "gpu", CHECKPOINT_EVALUATE: "gpu", CHECKPOINT_EXPORT: "gpu", PLAYGROUND_RESCORE: "judge",
          DISTILLATION_EXECUTE: "judge", TRY_EXECUTE: "judge", TRY_JUDGE: "judge", SERVER_HOLD: "serve", MCP_TEST: "judge",
          NOTIFY_DELIVER: "judge"}

LocalExecutor = Callable[[str, int], None]
_local: LocalExecutor | None = None


def dispatch_install_local(*, executor: LocalExecutor) -> None:
    """Sets what runs work when STUDIO_EXECUTOR is `inprocess` (WebappConfig.ready installs executors.py)."""
    global _local
    _local = executor


def work_enqueue(*, name: str, object_id: int, delay_s: float = 0.0) -> None:
    """Enqueues task `name` (one of QUEUES) for `object_id`, to start after `delay_s` seconds (a Celery countdown,
    or a timer of this process); call it once the row is committed."""
    if name not in QUEUES:
        raise ValueError(f"unknown task {name!r}; one of {', '.join(QUEUES)}")
    if settings.STUDIO_EXECUTOR == "celery":
        app.send_task(name, args=[object_id], queue=QUEUES[name], countdown=delay_s or None)
        return
    if _local is None:
        raise RuntimeError("no in-process executor is installed (WebappConfig.ready installs it)")
    if delay_s > 0:
        timer = threading.Timer(delay_s, _local, args=(name, object_id))
        timer.daemon = True  # a process that exits leaves it: the reaper re-queues what is due
        timer.start()
        return
    _local(name, object_id)
