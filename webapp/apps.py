from __future__ import annotations

from django.apps import AppConfig


class WebappConfig(AppConfig):
    name = "webapp"
    verbose_name = "Rubric Studio"
    default_auto_field = "django.db.models.BigAutoField"
