"""Experiment trackers for runs (issue 37; docs/use.md): which trackers the deployment offers, and a run's
`trackers` config section built from the deployment's settings and the run's choice.

Where a run reports (W&B project, entity, mode, directory; MLflow tracking URI and experiment; Langfuse's host) and
the keys come
from the deployment (settings and the workers' environment), never from a person: a run only chooses among the
offered trackers by name (the launch form's checkboxes, the API's `trackers`), and `trackers` is not a run
override. The worker adds the run's id and a link back to its page when it starts the engine.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.urls import reverse

TRACKERS = {"wandb": "Weights & Biases", "mlflow": "MLflow", "langfuse": "Langfuse (each trajectory a trace)"}


def trackers_available() -> list[str]:
    """The trackers this deployment offers, by name."""
    offered = {"wandb": settings.STUDIO_WANDB_PROJECT, "mlflow": settings.STUDIO_MLFLOW_TRACKING_URI,
               "langfuse": settings.STUDIO_LANGFUSE_HOST}
    return [name for name, on in offered.items() if on]


def run_trackers_config(*, chosen: list[str]) -> dict[str, Any] | None:
    """The run config's `trackers` section for the chosen tracker names (None when none is chosen); a name the
    deployment does not offer is refused by name."""
    chosen = list(dict.fromkeys(chosen or []))
    if not chosen:
        return None
    offered = trackers_available()
    refused = [name for name in chosen if name not in offered]
    if refused:
        raise ValidationError({"trackers": [
            f"this site does not offer {', '.join(map(str, refused))}; it offers "
            f"{', '.join(offered) if offered else 'no tracker'} (its administrators configure them)"]})
    section: dict[str, Any] = {}
    if "wandb" in chosen:
        section["wandb"] = {"project": settings.STUDIO_WANDB_PROJECT, "entity": settings.STUDIO_WANDB_ENTITY,
                            "mode": settings.STUDIO_WANDB_MODE, "dir": settings.STUDIO_WANDB_DIR}
    if "mlflow" in chosen:
        section["mlflow"] = {"tracking_uri": settings.STUDIO_MLFLOW_TRACKING_URI,
                             "experiment": settings.STUDIO_MLFLOW_EXPERIMENT}
    if "langfuse" in chosen:  # its keys: LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY in the workers' environment
        section["langfuse"] = {"host": settings.STUDIO_LANGFUSE_HOST,
                               "environment": settings.STUDIO_LANGFUSE_ENVIRONMENT}
    return section


def run_trackers_chosen(*, config: dict[str, Any]) -> list[str]:
    """The tracker names a run's config reports to."""
    section = config.get("trackers") or {}
    return [name for name in TRACKERS if section.get(name)]


def tracker_engine_config(*, run_id: int, config: dict[str, Any]) -> dict[str, Any]:
    """The run's config as the worker starts it: its trackers learn the run's id and its page's address."""
    if not run_trackers_chosen(config=config):
        return config
    url = settings.STUDIO_PUBLIC_URL + reverse("run-detail", args=[run_id])
    return {**config, "trackers": {**config["trackers"], "run_id": f"rubric-studio-run-{run_id}", "run_url": url}}
