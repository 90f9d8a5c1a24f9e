"""A GPU worker (STUDIO_GPU_WORKER) never trains on its CPU or with the local server unless the run asks for it:
it fails the run at once with the reason, rather than training for hours at a fraction of the speed."""
from __future__ import annotations

import pytest
import torch

from tests.webapp.factories import run_factory
from webapp.execution.runner import run_execute
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA: auto must resolve to CPU")
def test_a_gpu_worker_refuses_a_run_that_would_train_on_its_cpu(settings, scripted_engine):
    settings.STUDIO_GPU_WORKER = True
    settings.STUDIO_RUN_WORKER_CONFIG = {"server": {"kind": "vllm"}}  # device: auto
    run = run_factory()
    assert run_execute(run_id=run.id, worker="gpu@test") == RunStatus.FAILED
    run.refresh_from_db()
    assert "GPU worker" in run.error and "resolves to cpu" in run.error
    assert not run.events.filter(kind="run_started").exists()  # no engine was started


def test_a_gpu_worker_refuses_the_local_server_unless_the_run_asks_for_the_cpu(settings, scripted_engine):
    settings.STUDIO_GPU_WORKER = True
    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cuda"}  # server: local (transformers generate, not vLLM)
    run = run_factory()
    assert run_execute(run_id=run.id, worker="gpu@test") == RunStatus.FAILED
    run.refresh_from_db()
    assert "server.kind 'local'" in run.error
    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cpu"}  # an explicit CPU run: the local server on the CPU is its plan
    asks = run_factory()
    assert run_execute(run_id=asks.id, worker="gpu@test") == RunStatus.COMPLETED


def test_a_worker_not_marked_as_a_gpu_worker_runs_cpu_runs_as_before(settings, scripted_engine):
    settings.STUDIO_GPU_WORKER = False
    run = run_factory()
    assert run_execute(run_id=run.id, worker="cpu@test") == RunStatus.COMPLETED


def test_a_gpu_worker_refuses_the_inprocess_server_too(settings, scripted_engine):
    settings.STUDIO_GPU_WORKER = True
    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cuda", "server": {"kind": "inprocess"}}  # the same CPU sampler
    run = run_factory()
    assert run_execute(run_id=run.id, worker="gpu@test") == RunStatus.FAILED
    run.refresh_from_db()
    assert "server.kind 'inprocess'" in run.error
