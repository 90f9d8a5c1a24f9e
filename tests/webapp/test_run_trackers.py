"""Experiment trackers in the web app (issue 37): the site offers W&B and MLflow (its settings; the key from the
workers' environment), a run chooses among them by name, and a real run on the tiny model, executed by the worker,
reports to W&B's offline run directory and MLflow's file store the same step metrics and checkpoints its own pages
show, with a link back. A person cannot choose a tracker the site does not offer, nor say where one writes."""
from __future__ import annotations

import json

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

from tests.training.test_trackers import (  # noqa: E402
    mlflow_metric, mlflow_run_dir, wandb_history, wandb_records, wandb_summary,
)
from tests.webapp.factories import (  # noqa: E402
    agent_factory, member_factory, project_factory, run_factory, scenario_set_factory,
)
from webapp.execution.runner import engine_env, run_execute  # noqa: E402
from webapp.models import Role, Run, RunStatus  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def offered(settings, tmp_path):
    settings.STUDIO_WANDB_PROJECT, settings.STUDIO_WANDB_MODE = "studio-runs", "offline"
    settings.STUDIO_WANDB_DIR = str(tmp_path / "wandb-runs")
    settings.STUDIO_MLFLOW_TRACKING_URI = (tmp_path / "mlruns").as_uri()
    settings.STUDIO_PUBLIC_URL = "http://studio.test"
    return tmp_path


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def test_a_run_reports_the_metrics_and_checkpoints_its_pages_show_to_wandb_and_mlflow(
        tiny_run, offered, settings, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings.STUDIO_ENGINE_THREADS = 1
    run = tiny_run(steps=2, trackers=["wandb", "mlflow"])
    assert set(run.config["trackers"]) == {"wandb", "mlflow"}
    assert run_execute(run_id=run.id, worker="cpu@test") == RunStatus.COMPLETED, run.error
    run.refresh_from_db()
    assert not run.events.filter(kind="tracker_failed").exists()
    steps = {s.index: s.metrics for s in run.steps.order_by("index")}
    checkpoints = list(run.checkpoints.order_by("step_index").values_list("adapter_name", flat=True))
    assert sorted(steps) == [1, 2] and len(checkpoints) == 2

    (wb_dir,) = (offered / "wandb-runs" / "wandb").glob(f"offline-run-*-rubric-studio-run-{run.id}")
    history = wandb_history(wb_dir)
    for step, metrics in steps.items():  # every number the step table shows, by the same name
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert "reward_mean" in numbers
        assert {k: history[step][k] for k in numbers} == pytest.approx(numbers)
    assert wandb_summary(wb_dir)["checkpoints"] == checkpoints
    (started,) = [r.run for r in wandb_records(wb_dir) if r.WhichOneof("record_type") == "run"]
    assert started.notes == f"http://studio.test/runs/{run.id}/" and started.project == "studio-runs"

    ml_dir = mlflow_run_dir(offered / "mlruns")
    assert mlflow_metric(ml_dir, "reward_mean") == pytest.approx({s: m["reward_mean"] for s, m in steps.items()})
    tags = {p.name: p.read_text() for p in (ml_dir / "tags").iterdir()}
    assert [tags["checkpoint.1"], tags["checkpoint.2"]] == checkpoints
    assert tags["rubric_studio.url"] == f"http://studio.test/runs/{run.id}/"
    # what people read of the run's config names neither the worker's directory nor the store
    shown = json.dumps(api(run.project.owner).get(f"/api/runs/{run.id}/").json()["config"])
    assert str(offered) not in shown and '"project": "studio-runs"' in shown


def test_a_tracker_the_site_does_not_offer_is_refused_and_nothing_is_launched(settings):
    settings.STUDIO_WANDB_PROJECT, settings.STUDIO_MLFLOW_TRACKING_URI = "studio-runs", None
    project = project_factory()
    editor = member_factory(project=project, role=Role.EDITOR)
    body = {"project": project.id, "name": "r", "agent": agent_factory(project=project).id,
            "scenario_set": scenario_set_factory(project=project).id, "trackers": ["mlflow"]}
    refused = api(editor).post("/api/runs/", body, format="json")
    assert refused.status_code == 400 and "does not offer mlflow" in str(refused.json()["trackers"])
    unknown = api(editor).post("/api/runs/", {**body, "trackers": ["neptune"]}, format="json")
    assert unknown.status_code == 400 and "trackers" in unknown.json()
    # where a tracker writes is never a person's to say: `trackers` is no override
    placed = api(editor).post("/api/runs/", {**body, "trackers": ["wandb"], "overrides": {
        "trackers": {"mlflow": {"tracking_uri": "http://169.254.169.254/"}}}}, format="json")
    assert placed.status_code == 400 and "trackers" in json.dumps(placed.json())
    assert not Run.objects.exists()


def test_the_wandb_key_reaches_the_engine_of_a_run_that_reports_to_wandb_only(offered, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "the-sites-wandb-key")
    monkeypatch.setenv("OPENAI_API_KEY", "not-for-the-engine")
    reporting = run_factory(overrides={})
    Run.objects.filter(pk=reporting.pk).update(config={**reporting.config, "trackers": {"wandb": {"project": "p"}}})
    reporting.refresh_from_db()
    assert engine_env(reporting)["WANDB_API_KEY"] == "the-sites-wandb-key"
    assert "OPENAI_API_KEY" not in engine_env(reporting)
    assert "WANDB_API_KEY" not in engine_env(run_factory())


def test_the_launch_form_offers_the_sites_trackers_and_freezes_the_choice(offered, client):
    from django.urls import reverse

    project = project_factory()
    agent = agent_factory(project=project, environment_kind="game_2048")  # its own reward: no judge needed
    scenario_set = scenario_set_factory(project=project)
    client.force_login(project.owner)
    page = client.get(reverse("run-launch", args=[project.id])).content.decode()
    assert "Report to" in page and 'value="wandb"' in page and 'value="mlflow"' in page
    response = client.post(reverse("run-launch", args=[project.id]), {
        "kind": "grpo", "name": "reported", "agent": agent.id, "scenario_set": scenario_set.id, "steps": 2,
        "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-5, "seed": 0, "trackers": ["mlflow"]})
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get(name="reported")
    assert run.config["trackers"]["mlflow"] == {"tracking_uri": (offered / "mlruns").as_uri(),
                                               "experiment": "rubric-studio"}
    assert run.config["trackers"].get("wandb") is None
    # the project's next launch starts where its last run reported
    again = client.get(reverse("run-launch", args=[project.id])).content.decode()
    assert 'value="mlflow" id="id_trackers_1" checked' in again and 'value="wandb" id="id_trackers_0">' in again


def test_the_launch_form_has_no_trackers_where_the_site_offers_none(client, settings):
    from django.urls import reverse

    settings.STUDIO_WANDB_PROJECT = settings.STUDIO_MLFLOW_TRACKING_URI = None
    project = project_factory()
    client.force_login(project.owner)
    assert "Report to" not in client.get(reverse("run-launch", args=[project.id])).content.decode()
