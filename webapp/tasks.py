"""Celery tasks: thin wrappers around services. An entry point: it imports services, and services reach these
tasks only by name (webapp/execution/dispatch.py)."""
from __future__ import annotations

from webapp.celery_app import app
from webapp.execution.evaluation import checkpoint_evaluate_execute
from webapp.execution.executors import worker_name
from webapp.execution.runner import run_execute
from webapp.services.playground import playground_execute, rescores_reap_stale
from webapp.services.runs import runs_reap_stale


@app.task(name="webapp.tasks.run_execute_task", acks_late=False, ignore_result=True)
def run_execute_task(run_id: int) -> str:
    return run_execute(run_id=run_id, worker=f"celery@{worker_name()}")


@app.task(name="webapp.tasks.reap_stale_runs_task", ignore_result=True)
def reap_stale_runs_task() -> list[int]:
    rescores_reap_stale()
    return runs_reap_stale()


@app.task(name="webapp.tasks.playground_rescore_task", ignore_result=True)
def playground_rescore_task(rescore_id: int) -> str:
    return playground_execute(rescore_id=rescore_id)


@app.task(name="webapp.tasks.run_evaluate_task", ignore_result=True)
def run_evaluate_task(checkpoint_id: int) -> str:
    return checkpoint_evaluate_execute(checkpoint_id=checkpoint_id)
