from __future__ import annotations

from django.apps import AppConfig


class WebappConfig(AppConfig):
    name = "webapp"
    verbose_name = "Rubric Studio"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from webapp.api.strict_input import strict_input_install
        from training.environments.process_guard import hide_environment
        from webapp.execution import executors

        strict_input_install()
        # Outbound calls to addresses a project gave (judge, teacher, MCP) pass the deployment's egress policy.
        from webapp.egress_policy import egress_install

        egress_install()
        # The web process and its workers hold the database URL and the keys: no program they start may read them.
        hide_environment()

        executors.executor_install()
        # Only a process that serves the app adopts queued runs and reaps stale ones: a shell, a management
        # command, a test or a Celery worker importing webapp.asgi must not crash-mark runs another process owns.
        if executors.is_server_process():
            executors.embedded_startup()
