"""Celery tasks: thin wrappers around services (imported inside the body, DESIGN §1)."""
from __future__ import annotations

from webapp.celery_app import app


@app.task(name="webapp.tasks.run_execute_task", acks_late=False, ignore_result=True)
def run_execute_task(run_id: int) -> str:
    from webapp.execution.executors import worker_name
    from webapp.execution.runner import run_execute

    return run_execute(run_id=run_id, worker=f"celery@{worker_name()}")


@app.task(name="webapp.tasks.reap_stale_runs_task", ignore_result=True)
def reap_stale_runs_task() -> list[int]:
    from webapp.services.playground import rescores_reap_stale
    from webapp.services.runs import runs_reap_stale

    rescores_reap_stale()
    return runs_reap_stale()


@app.task(name="webapp.tasks.playground_rescore_task", ignore_result=True)
def playground_rescore_task(rescore_id: int) -> str:
    from webapp.services.playground import playground_execute

    return playground_execute(rescore_id=rescore_id)
