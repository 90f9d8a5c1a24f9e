"""Celery tasks: thin wrappers around services. An entry point: it imports services, and services reach these
tasks only by name (webapp/execution/dispatch.py)."""
from __future__ import annotations

from celery.signals import worker_ready

from webapp.celery_app import app
from webapp.execution.evaluation import checkpoint_evaluate_execute
from webapp.execution.exports import checkpoint_export_execute
from webapp.execution.mcp_testing import mcp_server_test_execute
from webapp.execution.executors import worker_name
from webapp.execution.runner import runs_execute_in_order
from webapp.execution.serving import project_server_hold
from webapp.execution.trying import try_execute, try_judge
from webapp.notifications.sending import notification_deliver
from webapp.services.distillation import distillation_execute, distillations_reap_stale
from webapp.services.external_calls import external_calls_prune
from webapp.services.gpu_plans import worker_gpus_report_here
from webapp.services.playground import playground_execute, rescores_reap_stale
from webapp.services.runs import runs_reap_stale


@worker_ready.connect
def report_gpus_on_start(**_: object) -> None:
    """A worker says what GPUs it has as it starts (and with each run heartbeat): the launch page's memory plan."""
    worker_gpus_report_here(worker=f"celery@{worker_name()}")


@app.task(name="webapp.tasks.run_execute_task", acks_late=False, ignore_result=True)
def run_execute_task(run_id: int) -> str:
    """`run_id` woke the worker; it runs the queued runs in launch order (FIFO), that one among them."""
    done = runs_execute_in_order(worker=f"celery@{worker_name()}")
    return done.get(run_id, "skipped")


@app.task(name="webapp.tasks.reap_stale_runs_task", ignore_result=True)
def reap_stale_runs_task() -> list[int]:
    rescores_reap_stale()
    distillations_reap_stale()
    return runs_reap_stale()


@app.task(name="webapp.tasks.external_calls_prune_task", ignore_result=True)
def external_calls_prune_task() -> int:
    return external_calls_prune()


@app.task(name="webapp.tasks.checkpoints_prune_task", ignore_result=True)
def checkpoints_prune_task() -> dict[int, list[int]]:
    from webapp.services.checkpoint_retention import runs_checkpoints_prune

    return runs_checkpoints_prune()


@app.task(name="webapp.tasks.playground_rescore_task", ignore_result=True)
def playground_rescore_task(rescore_id: int) -> str:
    return playground_execute(rescore_id=rescore_id)


@app.task(name="webapp.tasks.run_evaluate_task", ignore_result=True)
def run_evaluate_task(checkpoint_id: int) -> str:
    return checkpoint_evaluate_execute(checkpoint_id=checkpoint_id)


@app.task(name="webapp.tasks.distillation_task", ignore_result=True)
def distillation_task(distillation_id: int) -> str:
    return distillation_execute(distillation_id=distillation_id)


@app.task(name="webapp.tasks.project_server_hold_task", acks_late=False, ignore_result=True)
def project_server_hold_task(server_id: int) -> str:
    return project_server_hold(server_id=server_id, worker=f"celery@{worker_name()}")


@app.task(name="webapp.tasks.try_execute_task", ignore_result=True)
def try_execute_task(session_id: int) -> str:
    return try_execute(session_id=session_id)


@app.task(name="webapp.tasks.try_judge_task", ignore_result=True)
def try_judge_task(session_id: int) -> str:
    return try_judge(session_id=session_id)


@app.task(name="webapp.tasks.mcp_server_test_task", ignore_result=True)
def mcp_server_test_task(server_id: int) -> str:
    return mcp_server_test_execute(server_id=server_id)


@app.task(name="webapp.tasks.checkpoint_export_task", ignore_result=True)
def checkpoint_export_task(export_id: int) -> str:
    return checkpoint_export_execute(export_id=export_id)


@app.task(name="webapp.tasks.notification_deliver_task", bind=True, ignore_result=True, max_retries=None)
def notification_deliver_task(self, delivery_id: int) -> None:
    """One e-mail or webhook POST; retried with the service's backoff (it counts and caps the attempts)."""
    if (delay := notification_deliver(delivery_id=delivery_id)) is not None:
        raise self.retry(countdown=delay)
