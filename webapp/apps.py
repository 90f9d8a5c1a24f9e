from __future__ import annotations

from django.apps import AppConfig


class WebappConfig(AppConfig):
    name = "webapp"
    verbose_name = "Rubric Studio"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from webapp.execution import executors

        executors.executor_install()
        # Only a process that serves the app adopts queued runs and reaps stale ones: a shell, a management
        # command, a test or a Celery worker importing webapp.asgi must not crash-mark runs another process owns.
        if executors.is_server_process():
            executors.embedded_startup()
