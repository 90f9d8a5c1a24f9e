"""SFT runs in the web app: the "Teach (SFT)" launch (form and API), what its config holds and refuses, the
data file a worker writes, the events its engine sends, and "Reinforce from this checkpoint" (a GRPO fork)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import (
    agent_factory, conversation_rows, dataset_factory, member_factory, project_factory, scenario_set_factory,
)
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Role, Run, Scenario
from webapp.selectors.runs import run_chart_data
from webapp.services.runs import run_fork
from webapp.services.sft_runs import DATA_FILE, sft_engine_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue():
    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=3)
    Scenario.objects.create(scenario_set=scenario_set, external_id="v1", user_message="Held out?",
                            reference="secret reference", split=Scenario.Split.VALIDATION)
    return {"project": project, "agent": agent_factory(project=project, environment_kind="game_2048"),
            "scenario_set": scenario_set, "dataset": dataset_factory(project=project, rows=5)}


def teach_form(c, **fields) -> dict:
    return {"kind": "sft", "name": "teach-1", "agent": c["agent"].id, "scenario_set": c["scenario_set"].id,
            "dataset": c["dataset"].id, "epochs": 2, "batch_tokens": 512, "micro_batch_tokens": 256,
            "sft_learning_rate": 0.001, "warmup_ratio": 0.1, "schedule": "linear", "held_out_fraction": 0.2,
            "steps": 10, "group_size": 4, "groups_per_step": 2, "learning_rate": 1e-5, "seed": 0, **fields}


def api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def test_the_teach_form_launches_an_sft_run_on_the_datasets_latest_version(catalogue):
    client = Client()
    client.force_login(catalogue["project"].owner)
    response = client.post(reverse("run-launch", args=[catalogue["project"].id]), teach_form(catalogue))
    assert response.status_code == 302, response.content.decode()[-2000:]
    run = Run.objects.get(name="teach-1")
    assert run.kind == "sft" and run.dataset_version == catalogue["dataset"].latest_version
    assert run.total_steps == 0  # counted by the engine from the data (its run_started says how many)
    sft = run.config["sft"]
    assert (sft["epochs"], sft["batch_tokens"], sft["micro_batch_tokens"], sft["learning_rate"], sft["schedule"],
            sft["warmup_ratio"], sft["held_out_fraction"]) == (2, 512, 256, 0.001, "linear", 0.1, 0.2)
    assert sft["dataset"] == f"{catalogue['dataset'].name} v1" and sft["data_file"] is None
    assert "grpo" not in run.config
    # The scenarios are the held-out ones only, for the win rate: an SFT run never trains on scenarios.
    assert [s["id"] for s in run.config["scenarios"]] == ["v1"]
    assert run.config["evaluation"]["held_out_ids"] == ["v1"]
    page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    assert 'id="run-kind"' in page and 'id="loss-chart"' in page and 'id="reward-chart"' not in page
    assert "Teaching (SFT)" in page and f"{catalogue['dataset'].name} v1" in page


def test_a_teach_launch_needs_a_dataset_and_refuses_the_review_gate(catalogue):
    client = Client()
    client.force_login(catalogue["project"].owner)
    url = reverse("run-launch", args=[catalogue["project"].id])
    missing = client.post(url, teach_form(catalogue, dataset=""))
    assert missing.status_code == 400 and "choose the dataset this run teaches from" in missing.content.decode()
    gated = client.post(url, teach_form(catalogue, review_gate="on"))
    assert gated.status_code == 400 and "nothing to review" in gated.content.decode()
    assert not Run.objects.exists()


def test_overrides_cannot_make_a_run_teach_or_name_a_file_for_it(catalogue):
    # An editor tries to read a worker's file as "conversations" through the advanced JSON of a GRPO launch.
    editor = member_factory(project=catalogue["project"], role=Role.EDITOR)
    body = {"project": catalogue["project"].id, "name": "sneaky", "agent": catalogue["agent"].id,
            "scenario_set": catalogue["scenario_set"].id,
            "overrides": {"kind": "sft", "sft": {"data_file": "/etc/passwd"}}}
    refused = api(editor).post("/api/runs/", body, format="json")
    reasons = json.dumps(refused.json())
    assert refused.status_code == 400 and "kind cannot be set here" in reasons and "sft cannot be set here" in reasons
    # ... or through the SFT options of a teach launch: they are explicit fields, data_file is not one of them.
    teach = {**body, "overrides": {}, "kind": "sft", "dataset_version": catalogue["dataset"].latest_version.id,
             "sft": {"epochs": 1, "data_file": "/etc/passwd"}}
    refused = api(editor).post("/api/runs/", teach, format="json")
    assert refused.status_code == 400 and "not an SFT option: data_file" in json.dumps(refused.json())
    assert not Run.objects.exists()


def test_the_api_teaches_from_a_dataset_version_of_its_own_project_only(catalogue):
    owner = catalogue["project"].owner
    body = {"project": catalogue["project"].id, "name": "api-teach", "agent": catalogue["agent"].id,
            "scenario_set": catalogue["scenario_set"].id, "kind": "sft",
            "dataset_version": catalogue["dataset"].latest_version.id, "sft": {"epochs": 4, "learning_rate": 0.01}}
    created = api(owner).post("/api/runs/", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["dataset_version"] == catalogue["dataset"].latest_version.id
    assert created.json()["config"]["sft"]["epochs"] == 4
    other = dataset_factory(project=project_factory(owner=owner), rows=2)  # the same owner's other project
    crossed = api(owner).post("/api/runs/", {**body, "name": "x", "dataset_version": other.latest_version.id},
                              format="json")
    assert crossed.status_code == 400 and "choose a dataset of this project" in json.dumps(crossed.json())


def test_the_worker_writes_the_versions_rows_as_the_engines_data_file(catalogue, tmp_path):
    client = Client()
    client.force_login(catalogue["project"].owner)
    client.post(reverse("run-launch", args=[catalogue["project"].id]), teach_form(catalogue))
    run = Run.objects.get(name="teach-1")
    config = sft_engine_config(run=run, config=run.config, directory=tmp_path)
    assert config["sft"]["data_file"] == str(tmp_path / DATA_FILE)
    written = [json.loads(line) for line in (tmp_path / DATA_FILE).read_text().splitlines()]
    assert written == conversation_rows(5)
    assert run.config["sft"]["data_file"] is None  # the stored config names no file


def test_the_engines_sft_events_become_the_loss_curves_and_reinforce_forks_a_grpo_run(catalogue, tmp_path):
    client = Client()
    client.force_login(catalogue["project"].owner)
    client.post(reverse("run-launch", args=[catalogue["project"].id]), teach_form(catalogue))
    run = Run.objects.get(name="teach-1")
    Run.objects.filter(pk=run.id).update(status="running")  # as a worker's claim leaves it
    adapter = tmp_path / "step_0002"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    for event in ({"kind": "run_started", "run_name": "teach-1", "start_step": 1, "total_steps": 2, "resumed": False},
                  {"kind": "held_out_loss", "step": 0, "loss": 2.5, "tokens": 40, "conversations": 1},
                  {"kind": "train_step", "step": 1, "metrics": {"loss": 2.4}},
                  {"kind": "step_finished", "step": 1, "metrics": {"step": 1, "epoch": 1, "loss": 2.4}},
                  {"kind": "train_step", "step": 2, "metrics": {"loss": 1.9}},
                  {"kind": "held_out_loss", "step": 2, "loss": 2.0, "tokens": 40, "conversations": 1},
                  {"kind": "checkpoint_saved", "step": 2, "path": str(adapter), "adapter_name": "teach-1@2"},
                  {"kind": "step_finished", "step": 2, "metrics": {"step": 2, "epoch": 2, "loss": 1.9, "eval_loss": 2.0}},
                  {"kind": "run_finished", "status": "completed", "steps_done": 2}):
        run_event_ingest(run_id=run.id, event=event)
    run.refresh_from_db()
    assert run.status == "completed" and run.total_steps == 2
    chart = run_chart_data(run=run)
    assert chart["kind"] == "sft" and [p["loss"] for p in chart["points"]] == [2.4, 1.9]
    assert chart["held_out"] == [{"step": 0, "loss": 2.5}, {"step": 2, "loss": 2.0}]
    page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    assert "Reinforce from this checkpoint (GRPO)" in page
    checkpoint = Checkpoint.objects.get(run=run)
    form = client.get(reverse("run-fork", args=[checkpoint.id])).content.decode()
    assert "Reinforce from teach-1 step 2 (GRPO)" in form
    child = run_fork(user=catalogue["project"].owner, checkpoint=checkpoint, name="teach-1-rl-2",
                     rubric_version=None, judge_config=None, steps=3)
    assert child.kind == "grpo" and child.parent_run == run and child.dataset_version is None
    assert child.config["init_checkpoint"] == str(adapter)  # resolved from the checkpoint's id, server-side
    assert child.config["lora"] == run.config["lora"]  # the adapter's shape carries over
    assert {s["id"] for s in child.config["scenarios"]} == {"s1", "s2", "s3", "v1"}  # trains on s1-s3
    assert Path(child.config["output_dir"]) != Path(run.config["output_dir"])


def test_a_gpu_worker_lets_an_sft_run_without_a_win_rate_skip_the_sampling_server_check(catalogue, settings):
    from webapp.execution.runner import gpu_worker_refusal

    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cuda"}  # the deployment's placement (webapp/run_policy.py)
    client = Client()
    client.force_login(catalogue["project"].owner)
    client.post(reverse("run-launch", args=[catalogue["project"].id]),
                teach_form(catalogue))
    with_win_rate = Run.objects.get(name="teach-1").config
    assert "server.kind 'local'" in gpu_worker_refusal(with_win_rate)  # it samples for its win rate: vLLM please
    alone = {**with_win_rate, "scenarios": []}  # nothing to sample: the server is never started
    refusal = gpu_worker_refusal(alone)
    assert refusal is None or "server.kind" not in refusal  # only CUDA itself can refuse it (none on this machine)
