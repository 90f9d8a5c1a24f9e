"""Model cards built from what the run did (issue 48, item 3): one per run kind (GRPO, SFT, distillation,
SFT → GRPO), each read against the run's stored config: its kind, the dataset version or scenario set with the
engine's own split counts, the judge or the environment's reward, the checkpoint it started from, and the
held-out result where the run has one."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.factories import (
    agent_factory, conversation_rows, dataset_factory, judge_factory, project_factory, rubric_factory, run_factory,
    scenario_set_factory,
)
from training.sft.data import conversation_parse, split_held_out
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Run, Scenario
from webapp.models.datasets import DatasetRow, DatasetVersion, Distillation
from webapp.services.exports import export_model_card
from webapp.services.runs import run_fork

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue():
    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=3)
    Scenario.objects.create(scenario_set=scenario_set, external_id="v1", user_message="Held out?",
                            split=Scenario.Split.VALIDATION)
    return {"project": project, "agent": agent_factory(project=project, environment_kind="game_2048"),
            "scenario_set": scenario_set, "dataset": dataset_factory(project=project, rows=10)}


def _teach(c, dataset, name: str = "teach-1") -> Run:
    client = Client()
    client.force_login(c["project"].owner)
    response = client.post(reverse("run-launch", args=[c["project"].id]), {
        "kind": "sft", "name": name, "agent": c["agent"].id, "scenario_set": c["scenario_set"].id,
        "dataset": dataset.id, "epochs": 1, "batch_tokens": 512, "micro_batch_tokens": 256,
        "sft_learning_rate": 0.001, "warmup_ratio": 0.1, "schedule": "linear", "held_out_fraction": 0.3,
        "steps": 10, "group_size": 4, "groups_per_step": 2, "learning_rate": 1e-5, "seed": 0})
    assert response.status_code == 302, response.content.decode()[-2000:]
    return Run.objects.get(name=name)


def _finish(run: Run, events: list[dict], *, step: int = 2) -> Checkpoint:
    """The engine's events up to a checkpoint at `step`, as a worker ingests them."""
    Run.objects.filter(pk=run.id).update(status="running")
    for event in [{"kind": "run_started", "run_name": run.name, "start_step": 1, "total_steps": step,
                   "resumed": False}, *events,
                  {"kind": "checkpoint_saved", "step": step, "path": f"/checkpoints/{run.name}/{step}",
                   "adapter_name": f"{run.name}@{step}"},
                  {"kind": "run_finished", "status": "completed", "steps_done": step}]:
        run_event_ingest(run_id=run.id, event=event)
    return Checkpoint.objects.get(run=run, step_index=step)


def _engine_conversation_split(run: Run, rows: list[dict]) -> tuple[int, int]:
    """How the engine splits the run's conversations: its parser and seeded split, with the config's values."""
    conversations = [conversation_parse(row)[0] for row in rows]
    train, held = split_held_out(conversations, run.config["sft"]["held_out_fraction"], run.config["seed"])
    return len(train), len(held)


def _config_scenario_split(config: dict) -> tuple[int, int]:
    held = set(config["evaluation"]["held_out_ids"])
    return len([s for s in config["scenarios"] if s["id"] not in held]), len(held)


def test_a_grpo_runs_card_names_its_scenario_split_judge_rubric_and_held_out_win_rate(catalogue):
    c = catalogue
    judge = judge_factory(project=c["project"], model="openai/card-judge")
    rubric = rubric_factory(project=c["project"], text="Prefer legal moves.").latest_version
    run = run_factory(project=c["project"], agent=c["agent"], scenario_set=c["scenario_set"], judge_config=judge,
                      rubric_version=rubric, status="queued")
    checkpoint = _finish(run, [{"kind": "evaluation", "step": 2, "metrics": {
        "eval_win_rate": 0.75, "eval_ci_low": 0.6, "eval_ci_high": 0.9, "eval_scenarios": 1}}])
    card = export_model_card(checkpoint=checkpoint)
    trained, held = _config_scenario_split(run.config)
    assert (trained, held) == (3, 1)
    assert "trained with GRPO by Rubric Studio" in card and "| kind | GRPO |" in card
    assert f"scenario set “{c['scenario_set'].name}”: {trained} training scenarios, {held} held out" in card
    assert f"| reward | judge `{run.config['judge']['judge_model']}`" in card and f"| rubric | {rubric} |" in card
    assert "> Prefer legal moves." in card
    assert "| started from | the base model (a new adapter) |" in card
    assert "| held-out win rate | 75.0% against the base model (95 % interval 60.0%–90.0%, 1 scenarios) |" in card


def test_an_sft_runs_card_names_its_dataset_version_real_split_and_held_out_loss_not_grpo(catalogue):
    c = catalogue
    run = _teach(c, c["dataset"])
    train_n, held_n = _engine_conversation_split(run, conversation_rows(10))
    assert train_n + held_n == 10 and held_n > 0
    checkpoint = _finish(run, [
        {"kind": "held_out_loss", "step": 0, "loss": 2.5, "tokens": 40, "conversations": held_n},
        {"kind": "held_out_loss", "step": 2, "loss": 2.0, "tokens": 40, "conversations": held_n}])
    card = export_model_card(checkpoint=checkpoint)
    assert "GRPO" not in card and "0 training scenarios" not in card and "judge: none" not in card
    assert "| kind | SFT |" in card and "supervised fine-tuning (SFT)" in card
    assert run.config["sft"]["dataset"] == f"{c['dataset'].name} v1"
    assert (f"| training data | dataset “{c['dataset'].name}” v1: {train_n} conversations trained on, {held_n} "
            "held out for the held-out loss |") in card
    assert "| objective | cross-entropy on the assistant turns" in card and "| reward |" not in card
    assert f"| held-out loss | 2.0000 at step 2 on {held_n} conversations (2.5000 before training) |" in card
    assert f"| held-out scenarios | 1 of scenario set “{c['scenario_set'].name}”" in card
    assert "| started from | the base model (a new adapter) |" in card


def test_a_distilled_runs_card_says_distillation_and_names_the_teacher(catalogue):
    c = catalogue
    teacher = judge_factory(project=c["project"], model="openai/teacher-model")
    dataset = dataset_factory(project=c["project"], rows=0)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, source=DatasetVersion.Source.DISTILLATION,
                                            note="distilled", row_count=4)
    DatasetRow.objects.bulk_create(DatasetRow(version=version, index=i, messages=r["messages"], tools=r.get("tools"),
                                              metadata={}) for i, r in enumerate(conversation_rows(4)))
    Distillation.objects.create(project=c["project"], dataset=dataset, agent=c["agent"],
                                scenario_set=c["scenario_set"], teacher=teacher, judge_config=teacher,
                                status=Distillation.Status.ACCEPTED, accepted_version=version)
    run = _teach(c, dataset, name="distilled-1")
    train_n, held_n = _engine_conversation_split(run, conversation_rows(4))
    card = export_model_card(checkpoint=_finish(run, []))
    assert "| kind | distillation |" in card and "GRPO" not in card
    assert (f"dataset “{dataset.name}” v1, distilled by teacher `openai/teacher-model`: {train_n} conversations "
            f"trained on, {held_n} held out") in card
    assert "| held-out loss | not measured" in card  # the engine sent none: nothing is made up


def test_a_grpo_run_forked_from_an_sft_checkpoint_says_sft_then_grpo_and_where_it_started(catalogue):
    c = catalogue
    parent = _teach(c, c["dataset"])
    sft_checkpoint = _finish(parent, [])
    child = run_fork(user=c["project"].owner, checkpoint=sft_checkpoint, name="teach-1-rl-2", rubric_version=None,
                     judge_config=None, steps=3)
    card = export_model_card(checkpoint=_finish(child, [], step=3))
    trained, held = _config_scenario_split(child.config)
    assert "| kind | SFT → GRPO |" in card and "GRPO, starting from an SFT checkpoint" in card
    assert "| started from | `teach-1@2`: step 2 of run “teach-1” (SFT) |" in card
    assert f"{trained} training scenarios, {held} held out" in card and (trained, held) == (3, 1)
    kind = child.config["environment"]["kind"]
    assert f"| reward | the environment's own reward (`{kind}`); no judge |" in card
    assert "| held-out win rate | not evaluated" in card
