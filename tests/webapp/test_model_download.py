"""The managed download (webapp/execution/model_fetch.py, training/model/hub): a catalogue model with a Hugging Face id
is fetched by the worker into the shared model cache before the engine starts, from a double of the hub's HTTP
API serving the tiny model (tests/hub_double.py), through huggingface_hub and real HTTP. The tests' environment
sets HF_HUB_OFFLINE=1 (Makefile): the download works all the same, and the engine stays offline."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.hub_double import HubDouble
from tests.ports import free_port
from tests.webapp.factories import agent_factory, catalogue_model, project_factory, run_factory, scenario_set_factory
from webapp.execution.model_fetch import ModelFetch, model_engine_env, run_model_fetch
from webapp.execution.runner import run_execute
from webapp.models import Run, RunStatus
from webapp.services.runs import run_claim

pytestmark = pytest.mark.django_db
REPO = "org/tiny"


@pytest.fixture
def hub(tiny_model_dir, settings, tmp_path, scripted_engine, monkeypatch):
    """The hub double serving the tiny model as org/tiny, the deployment pointed at it, an empty model cache."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with HubDouble(repo_id=REPO, directory=tiny_model_dir) as double:
        settings.STUDIO_MODEL_HUB = double.endpoint
        settings.STUDIO_MODEL_CACHE_DIR = tmp_path / "models"
        yield double


def _run(settings, name: str = "r") -> Run:
    project = project_factory()
    agent = agent_factory(project=project, base_model=catalogue_model(settings, REPO))  # the catalogue lists the id
    return run_factory(project=project, agent=agent, name=name, steps=1)


def _downloads(run: Run) -> list[dict]:
    return [e.payload for e in run.events.filter(kind="model_download").order_by("seq")]


def test_a_run_of_a_hub_model_shows_the_download_in_its_phase_then_starts_and_the_next_run_downloads_nothing(
        hub, settings):
    settings.STUDIO_MODEL_CHECK = "worker"  # the worker checks the fetched model itself: it loads and fits
    hub.pause_s = 1.5  # the weights stop midway, so the run is seen part-way through the download
    run = _run(settings)
    assert run_execute(run_id=run.id, worker="w") == RunStatus.COMPLETED, Run.objects.get(pk=run.pk).error
    downloads = _downloads(run)
    total = sum(len(b) for b in hub.files.values())
    assert downloads[0]["state"] == "downloading" and downloads[0]["done"] == 0 and downloads[0]["total"] == total
    midway = [d for d in downloads if d["state"] == "downloading" and 0 < d["done"] < total]
    shown = re.escape(f" of {total / 1e6:.1f} MB")  # the tiny model's 2.6 MB
    assert midway and re.fullmatch(rf"downloading org/tiny: \d\.\d{shown}", midway[0]["run"]["phase"])
    assert downloads[-1]["state"] == "downloaded" and "model.safetensors" in hub.downloads()
    kinds = list(run.events.order_by("seq").values_list("kind", flat=True))
    assert kinds.index("run_started") > kinds.index("model_download")  # the engine started after the download
    snapshot = next((settings.STUDIO_MODEL_CACHE_DIR / "models--org--tiny" / "snapshots").iterdir())
    assert (snapshot / "model.safetensors").read_bytes() == hub.files["model.safetensors"]
    # The next run of the model takes it from the cache: it asks the hub nothing, neither the API nor a file.
    asked = len(hub.requests)
    second = _run(settings, "second")
    assert run_claim(run_id=second.id, worker="w")  # as the worker does before fetching
    assert run_model_fetch(run_id=second.id, worker="w", config=second.config).snapshot == snapshot
    assert len(hub.requests) == asked
    assert [d["state"] for d in _downloads(second)] == ["cached"]
    assert "in this worker's model cache" in _downloads(second)[0]["run"]["phase"]


def test_an_unreachable_hub_fails_the_run_with_its_address_before_any_engine_starts(hub, settings):
    port = free_port()
    settings.STUDIO_MODEL_HUB = f"http://127.0.0.1:{port}"
    run = _run(settings)
    assert run_execute(run_id=run.id, worker="w") == RunStatus.FAILED
    run.refresh_from_db()
    assert run.error.startswith(f"cannot reach the model hub at 127.0.0.1:{port} to download org/tiny")
    assert not (Path(run.output_dir) / "engine.log").exists()  # no engine was started
    assert not run.events.filter(kind="run_started").exists()


def test_a_model_that_needs_a_token_fails_the_run_saying_so_and_the_workers_token_fetches_it(hub, settings,
                                                                                               monkeypatch):
    hub.token = "hf_deployment_token"
    run = _run(settings)
    assert run_execute(run_id=run.id, worker="w") == RunStatus.FAILED
    run.refresh_from_db()
    assert run.error.startswith("org/tiny needs a token: set HF_TOKEN on the workers")
    assert not (Path(run.output_dir) / "engine.log").exists() and hub.downloads() == []
    monkeypatch.setenv("HF_TOKEN", "hf_deployment_token")  # the deployment's environment: the worker's own
    again = _run(settings, "again")
    assert run_claim(run_id=again.id, worker="w")  # as the worker does before fetching
    fetched = run_model_fetch(run_id=again.id, worker="w", config=again.config)
    assert fetched.error == "" and (fetched.snapshot / "model.safetensors").is_file()
    assert "model.safetensors" in hub.downloads()


def test_a_model_larger_than_the_free_disk_fails_the_run_before_downloading_anything(hub, settings):
    hub.claimed_sizes = {"model.safetensors": 10**16}  # 10 PB, as the hub's API reports it
    run = _run(settings)
    assert run_execute(run_id=run.id, worker="w") == RunStatus.FAILED
    run.refresh_from_db()
    assert run.error.startswith("not enough disk for org/tiny: it needs 10000000.0 GB")
    assert hub.downloads() == [] and not (Path(run.output_dir) / "engine.log").exists()


def test_the_launch_leaves_an_uncached_hub_model_to_the_workers_download(hub, settings):
    settings.STUDIO_MODEL_CHECK = "launch"
    settings.STUDIO_HF_MODELS = ["org/*"]
    project = project_factory()
    api = APIClient()
    api.force_authenticate(project.owner)
    agent = agent_factory(project=project, base_model=REPO, environment_options={"exact_match": True})
    response = api.post("/api/runs/", {"project": project.id, "name": "r", "agent": agent.id,
                                       "scenario_set": scenario_set_factory(project=project).id, "steps": 2},
                        format="json")
    assert response.status_code == 201, response.content
    assert hub.requests == []  # the web process asks no hub: the worker fetches the model when the run starts


def test_the_worker_checks_the_fetched_model_and_names_it_by_its_id_not_the_cache_path(hub, settings):
    settings.STUDIO_MODEL_CHECK = "worker"
    project = project_factory()
    agent = agent_factory(project=project, base_model=catalogue_model(settings, REPO), max_tokens=5000)
    run = run_factory(project=project, agent=agent, steps=1)
    assert run_execute(run_id=run.id, worker="w") == RunStatus.FAILED
    run.refresh_from_db()
    assert "sampling.max_tokens 5000 is more than base model org/tiny" in run.error  # the tiny model holds 1024
    assert "snapshots" not in run.error and not (Path(run.output_dir) / "engine.log").exists()


def test_a_run_cancelled_while_its_model_downloads_stops_the_download_and_ends_cancelled(hub, settings):
    hub.pause_s = 30.0  # the download would take that long
    run = _run(settings)
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)  # cancelled as its worker claims it
    assert run_execute(run_id=run.id, worker="w") == RunStatus.CANCELLED
    assert not (Path(run.output_dir) / "engine.log").exists()


def test_the_engine_of_a_fetched_model_loads_it_offline_from_the_cache_and_never_holds_the_hub_token(settings,
                                                                                                      tmp_path):
    settings.STUDIO_MODEL_CACHE_DIR = tmp_path / "models"
    env = model_engine_env({"HF_TOKEN": "hf_x", "PATH": "/usr/bin"}, ModelFetch(snapshot=tmp_path / "snapshot"))
    assert env == {"PATH": "/usr/bin", "HF_HUB_CACHE": str(tmp_path / "models"), "HF_HUB_OFFLINE": "1"}
    assert model_engine_env({"HF_TOKEN": "hf_x"}, ModelFetch()) == {"HF_TOKEN": "hf_x"}  # no hub model: as it was
