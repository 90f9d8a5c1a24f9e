"""The memory plan at launch: what GPUs the workers reported, and whether a run's config fits them.

Workers report their GPUs (training.model.gpu.sharing.read_gpus: nvidia-smi, no CUDA in the worker process) when
they start and with each run heartbeat; the reports live in the cache (Redis with Celery). With the embedded
executor this process is the worker and reads its own GPUs. The plan itself is the engine's
(training/model/gpu/memory_plan.py); this module only finds its inputs and says the result in the launch's words.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)
CACHE_KEY = "gpu-workers"


def worker_gpus_report(*, worker: str, gpus: list[Any]) -> None:
    """Records `worker`'s GPUs (GpuMemory records) now; a cache failure is logged, never raised to the run."""
    try:
        reports = cache.get(CACHE_KEY) or {}
        reports[worker] = {"at": time.time(), "gpus": [asdict(g) for g in gpus]}
        cache.set(CACHE_KEY, reports, timeout=None)
    except Exception:  # noqa: BLE001 - a report is advisory; the run goes on
        log.warning("worker %s: its GPU report was not recorded", worker, exc_info=True)


def worker_gpus_report_here(*, worker: str) -> None:
    from training.model.gpu.sharing import read_gpus

    worker_gpus_report(worker=worker, gpus=read_gpus())


def worker_gpus_for_launch() -> tuple[str, list[Any], float | None]:
    """(where, GPUs, when reported): this process's own with the embedded executor, else the newest report of a
    worker that has GPUs (or of any worker, when none has)."""
    from training.model.gpu.sharing import GpuMemory, read_gpus

    if settings.STUDIO_EXECUTOR == "inprocess":
        return "this server", read_gpus(), None
    reports = cache.get(CACHE_KEY) or {}
    if not reports:
        return "", [], None
    name, report = max(reports.items(), key=lambda kv: (bool(kv[1]["gpus"]), kv[1]["at"]))
    return f"worker {name}", [GpuMemory(**g) for g in report["gpus"]], report["at"]


def run_config_memory_plan(*, config: dict[str, Any]) -> dict[str, Any]:
    """The plan of a built run config on the workers' GPUs, as the launch page shows it: `gpus` (a sentence),
    `lines` (the plan), `fits` (True/False, None when there is nothing to judge against), `refusal`, and
    `checkpointing` (whether gradient checkpointing will be on, and why)."""
    from training.config import parse_run_config
    from training.types import TrainingError
    from training.model.gpu.memory_plan import gib, plan_memory, read_shape

    where, gpus, _ = worker_gpus_for_launch()
    if not gpus:
        summary = (f"{where} reports no GPU: runs train on its CPU" if where else
                   "no worker has reported its GPUs yet: the plan is checked when a worker takes the run")
    else:
        summary = f"{where}: " + ", ".join(f"GPU {g.index} {g.name} {gib(g.total)} ({gib(g.free)} free)"
                                           for g in gpus)
    try:
        config_model = parse_run_config(config)
        if config_model.device == "cpu":  # the deployment trains on CPU: no GPU to plan for
            return {"gpus": "runs train on the CPU (device: cpu)", "lines": [], "fits": None, "refusal": None,
                    "problem": None, "checkpointing": None}
        plan = plan_memory(config_model, read_shape(config_model.base_model), [g.total for g in gpus])
    except TrainingError as err:
        return {"gpus": summary, "lines": [], "fits": None, "refusal": None, "problem": str(err),
                "checkpointing": None}
    fits = plan.fits if gpus else None
    return {"gpus": summary, "lines": plan.lines() if gpus else [], "fits": fits,
            "refusal": plan.refusal() if gpus else None, "problem": None,
            "checkpointing": f"{'on' if plan.gradient_checkpointing else 'off'} ({plan.checkpointing_reason})"}


def run_config_memory_refusal(*, config: dict[str, Any]) -> str | None:
    """Why the run cannot fit the reported GPUs, in words a person can act on; None when it fits or when there
    is nothing to judge against (no GPU reported, a model whose config.json is not on this machine)."""
    return run_config_memory_plan(config=config)["refusal"]


def agent_memory_plan_preview(*, agent: Any) -> dict[str, Any] | None:
    """The plan for `agent`'s base model with the deployment's run settings and the launch form's defaults, for
    the launch page before anything is submitted (None without an agent)."""
    if agent is None:
        return None
    from webapp.model_catalogue import BaseModelChoiceError, resolve_base_model
    from webapp.services.config_merge import deep_merge

    try:
        source = resolve_base_model(agent.base_model).source
    except BaseModelChoiceError as err:  # the launch refuses it too, naming the agent
        return {"gpus": "", "lines": [], "fits": None, "refusal": None, "problem": str(err), "checkpointing": None}
    config = deep_merge({"base_model": source, "scenarios": [{"id": "preview", "user_message": "-"}]},
                        dict(settings.STUDIO_RUN_WORKER_CONFIG))
    return run_config_memory_plan(config=config)
