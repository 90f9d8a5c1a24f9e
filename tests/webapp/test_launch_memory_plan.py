"""The launch page shows the memory plan against the GPUs the workers reported (gradient checkpointing's `auto`
choice and why included), and a run that cannot fit them, or that puts vLLM beside the trainer with
`gpu_sharing: none`, is refused with the plan's numbers in words (docs/gpu.md). No GPU here: the workers' reports
are recorded as a worker records them, and the embedded server's own reading finds no nvidia-smi."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.urls import reverse

from tests.webapp.factories import TEST_TINY_MODEL, agent_factory, project_factory, scenario_set_factory
from training.model.gpu.sharing import GpuMemory, parse_smi
from webapp.models import Run
from webapp.services.gpu_plans import CACHE_KEY, worker_gpus_report

pytestmark = pytest.mark.django_db
GiB = 2**30


@pytest.fixture
def editor(client, tiny_model_dir):
    project = project_factory()
    client.force_login(project.owner)
    client.project = project
    client.agent = agent_factory(project=project, base_model=TEST_TINY_MODEL,
                                 environment_options={"exact_match": True})
    cache.delete(CACHE_KEY)
    yield client
    cache.delete(CACHE_KEY)


def _form(client, **extra):
    return {"name": "r", "agent": client.agent.id, "scenario_set": scenario_set_factory(project=client.project).id,
            "steps": 2, "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0, **extra}


GPU_WORKERS = {"STUDIO_EXECUTOR": "celery", "STUDIO_MODEL_CHECK": "launch", "STUDIO_RUN_WORKER_CONFIG": {"device": "cuda"}}


@override_settings(**GPU_WORKERS)
def test_the_launch_page_shows_the_plan_on_the_gpus_a_worker_reported(editor):
    worker_gpus_report(worker="celery@gpu-1", gpus=[GpuMemory(0, "Test GPU <80GB>", 79 * GiB, 80 * GiB)])
    html = editor.get(reverse("run-launch", args=[editor.project.id])).content.decode()
    assert f"Memory plan for {editor.agent.name}: fits" in html
    assert "worker celery@gpu-1: GPU 0 Test GPU &lt;80GB&gt; 80.0 GiB (79.0 GiB free)" in html  # escaped
    assert "verdict: fits, with" in html and "trainer: weights" in html


@override_settings(**GPU_WORKERS)
def test_a_run_too_big_for_the_reported_gpu_is_refused_with_its_numbers_and_launches_nothing(editor):
    worker_gpus_report(worker="celery@gpu-1", gpus=[GpuMemory(0, "Small GPU", GiB // 2, GiB // 2)])
    response = editor.post(reverse("run-launch", args=[editor.project.id]), _form(editor))
    assert response.status_code == 400
    html = response.content.decode()
    assert "the run does not fit on GPU 0 (0.5 GiB): the trainer needs" in html
    assert "GiB short. To fit: " in html and "a GPU with at least" in html
    assert Run.objects.count() == 0


@override_settings(STUDIO_EXECUTOR="celery", STUDIO_RUN_WORKER_CONFIG={"device": "cuda"})
def test_before_any_worker_reported_the_page_says_the_plan_waits_for_one(editor):
    html = editor.get(reverse("run-launch", args=[editor.project.id])).content.decode()
    assert "no GPU to judge against" in html and "no worker has reported its GPUs yet" in html


@override_settings(STUDIO_EXECUTOR="inprocess", STUDIO_RUN_WORKER_CONFIG={"device": "auto"})
def test_an_embedded_server_without_a_gpu_says_so(editor, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: a machine without an NVIDIA driver
    html = editor.get(reverse("run-launch", args=[editor.project.id])).content.decode()
    assert "this server reports no GPU: runs train on its CPU" in html


def test_nvidia_smi_readings_follow_the_visible_devices():
    text = "0, NVIDIA H100, 81559, 80000\n1, NVIDIA H100, 81559, 1000\n2, NVIDIA H100, 81559, 2000\n"
    assert [(g.index, g.free) for g in parse_smi(text, "2,0")] == [(0, 2000 * 2**20), (1, 80000 * 2**20)]
    assert [g.total for g in parse_smi(text, None)] == [81559 * 2**20] * 3
    assert parse_smi("garbage\n", None) == []


def test_the_run_page_names_the_sharing_the_engine_chose(client):
    from tests.webapp.factories import run_factory
    from training.events import MemoryPlanned
    from webapp.live.ingest import run_event_ingest

    run = run_factory()
    client.force_login(run.project.owner)
    assert 'id="memory-plan"' not in client.get(f"/runs/{run.id}/header/").content.decode()
    event = MemoryPlanned(sharing="sleep", reason="vLLM and the trainer do not fit side by side, so they take turns",
                          gpu_memory_utilization=0.58, lines=["GPU 0 (40.0 GiB): needs 39.0 GiB at most", "<b>x</b>"])
    run_event_ingest(run_id=run.id, event=event.to_dict())
    header = client.get(f"/runs/{run.id}/header/").content.decode()
    assert "GPU sharing: sleep\n    (vLLM and the trainer do not fit side by side, so they take turns); vLLM's share 0.58" \
        in header
    assert "GPU 0 (40.0 GiB): needs 39.0 GiB at most" in header and "&lt;b&gt;x&lt;/b&gt;" in header
    run.refresh_from_db()
    assert run.phase == "GPU sharing: sleep"


@override_settings(**GPU_WORKERS)
def test_the_launch_page_says_checkpointing_stays_off_when_the_plan_fits_without_it(editor):
    worker_gpus_report(worker="celery@gpu-1", gpus=[GpuMemory(0, "Test GPU", 79 * GiB, 80 * GiB)])
    html = editor.get(reverse("run-launch", args=[editor.project.id])).content.decode()
    assert "Gradient checkpointing: off (auto: the plan fits without it)" in html
    assert "terms: measured: activations by the probe of this architecture" in html


@override_settings(STUDIO_EXECUTOR="celery", STUDIO_MODEL_CHECK="launch",
                   STUDIO_RUN_WORKER_CONFIG={"device": "cuda", "server": {"kind": "vllm", "gpu_sharing": "none"}})
def test_gpu_sharing_none_on_a_one_gpu_worker_is_refused_at_launch_naming_the_plan(editor):
    worker_gpus_report(worker="celery@gpu-1", gpus=[GpuMemory(0, "Test GPU", 79 * GiB, 80 * GiB)])
    response = editor.post(reverse("run-launch", args=[editor.project.id]), _form(editor))
    assert response.status_code == 400
    html = response.content.decode()
    assert "server.gpu_sharing &#x27;none&#x27; puts vLLM and the trainer on the same GPU 0 without a plan" in html
    assert "The plan would share it as &#x27;split&#x27;" in html
    assert Run.objects.count() == 0
