"""Checkpoints kept by a policy (issue 47): once a run has ended, its last k checkpoints, the best by held-out win
rate and any served, forked from or exported stay, rows and adapter folders; the rest are deleted, across a
resume and a fork, and the run page says what was kept and why."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from tests.webapp.factories import agent_factory, project_factory, run_factory, scenario_set_factory
from webapp.execution.runner import runs_execute_in_order
from webapp.live.ingest import run_event_ingest
from webapp.models import Run, RunStatus
from webapp.services import runs as run_services
from webapp.services.checkpoint_retention import run_checkpoints_prune, runs_checkpoints_prune
from webapp.services.exports import checkpoint_export_request
from webapp.services.trying import try_create

pytestmark = pytest.mark.django_db


def _ended_run(*, keep_last: int, steps: int, status: str = RunStatus.COMPLETED, project=None, **fields) -> Run:
    run = run_factory(project=project or project_factory(), status=status, steps=steps,
                      overrides={"retention": {"keep_last": keep_last}}, **fields)
    for step in range(1, steps + 1):
        _checkpoint(run, step)
    return run


def _checkpoint(run: Run, step: int, *, optimizer: bool = False) -> Path:
    folder = Path(run.output_dir) / "checkpoints" / f"step_{step:04d}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"x" * 1000)
    if optimizer:
        (folder / "optimizer.pt").write_bytes(b"o" * 10)
    run_event_ingest(run_id=run.pk, event={"kind": "checkpoint_saved", "step": step, "path": str(folder),
                                           "adapter_name": f"{run.config['name']}@{step}"})
    return folder


def _evaluated(run: Run, step: int, win_rate: float) -> None:
    run_event_ingest(run_id=run.pk, event={"kind": "evaluation", "step": step, "model": f"r@{step}",
                                           "baseline": "base", "scenarios": [],
                                           "metrics": {"eval_win_rate": win_rate, "eval_ci_low": win_rate - 0.1,
                                                       "eval_ci_high": win_rate + 0.1}})


def _on_disk(run: Run) -> list[int]:
    return sorted(int(p.name[5:]) for p in (Path(run.output_dir) / "checkpoints").glob("step_*"))


def _rows(run: Run) -> list[int]:
    return list(run.checkpoints.order_by("step_index").values_list("step_index", flat=True))


def test_an_ended_run_keeps_its_last_k_and_its_best_and_the_page_says_why(client):
    run = _ended_run(keep_last=2, steps=5)
    for step, rate in ((1, 0.55), (2, 0.81), (3, 0.7)):
        _evaluated(run, step, rate)

    assert run_checkpoints_prune(run_id=run.pk) == [1, 3]

    assert _rows(run) == [2, 4, 5] and _on_disk(run) == [2, 4, 5]
    client.force_login(run.project.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "keeps the last 2 and the best by held-out win rate" in page
    assert "Deleted after the run: steps 1, 3 (2.0\xa0KB freed)" in page
    assert "kept: best held-out win rate (81%)" in page
    assert page.count("kept: one of the last 2") == 2
    assert run_checkpoints_prune(run_id=run.pk) == []  # a second pass finds nothing more


def test_a_running_run_keeps_everything_and_its_page_says_what_goes_when_it_ends(client):
    run = _ended_run(keep_last=1, steps=3, status=RunStatus.RUNNING)

    assert run_checkpoints_prune(run_id=run.pk) == [] and runs_checkpoints_prune() == {}

    assert _on_disk(run) == [1, 2, 3]
    client.force_login(run.project.owner)
    page = client.get(f"/runs/{run.pk}/checkpoints/").content.decode()
    assert page.count("deleted when the run ends") == 2 and "kept: one of the last 1" in page


def test_served_forked_and_exported_checkpoints_outlive_the_policy(client):
    project = project_factory()
    agent = agent_factory(project=project, environment_options={"exact_match": True})  # its own reward: no judge
    run = _ended_run(keep_last=1, steps=5, project=project, name="parent", agent=agent)
    served, forked, exported = (run.checkpoints.get(step_index=s) for s in (1, 2, 3))
    try_create(user=project.owner, project=project, agent=run.agent, checkpoint_ids=[served.pk], message="hi")
    fork = run_services.run_fork(user=project.owner, checkpoint=forked, name="child", rubric_version=None,
                                 judge_config=None, steps=2, overrides={"retention": {"keep_last": 1}})
    checkpoint_export_request(user=project.owner, checkpoint=exported)

    assert run_checkpoints_prune(run_id=run.pk) == [4]

    assert _rows(run) == [1, 2, 3, 5] and _on_disk(run) == [1, 2, 3, 5]
    client.force_login(project.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    for words in ("kept: served (", "kept: run child was forked from it", "kept: exported", "kept: one of the last 1"):
        assert words in page
    # The fork's own policy deletes its own old checkpoints, never its parent's adapter that it started from.
    for step in (1, 2):
        _checkpoint(fork, step)
    Run.objects.filter(pk=fork.pk).update(status=RunStatus.COMPLETED)
    assert run_checkpoints_prune(run_id=fork.pk) == [1]
    assert Path(fork.config["init_checkpoint"]).is_dir() and _on_disk(run) == [1, 2, 3, 5]


def test_a_failed_run_keeps_its_resume_point_and_after_the_resume_the_policy_applies_to_the_new_end():
    run = run_factory(status=RunStatus.RUNNING, steps=6, overrides={"retention": {"keep_last": 2}})
    for step in (1, 2, 3, 4):
        _checkpoint(run, step, optimizer=step == 2)  # the optimizer state a resume reloads is step 2's
    run_event_ingest(run_id=run.pk, event={"kind": "run_failed", "step": 5, "error": "out of memory"})
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED

    assert run_checkpoints_prune(run_id=run.pk) == [1]
    assert _on_disk(run) == [2, 3, 4]

    run_services.run_resume(user=run.project.owner, run=Run.objects.get(pk=run.pk))
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
    assert run_checkpoints_prune(run_id=run.pk) == []  # queued again: it resumes from step 4 with step 2's state
    # The resumed engine trains steps 5 and 6 and completes.
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    for step in (5, 6):
        _checkpoint(run, step)
    run_event_ingest(run_id=run.pk, event={"kind": "run_finished", "status": "completed", "steps_done": 6})
    assert Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED

    call_command("prune_checkpoints")  # the schedule's pass

    assert _rows(run) == [5, 6] and _on_disk(run) == [5, 6]
    assert Run.objects.get(pk=run.pk).checkpoints_pruned["steps"] == [1, 2, 3, 4]


def test_a_run_that_keeps_every_checkpoint_loses_none():
    run = _ended_run(keep_last=0, steps=3)

    assert run_checkpoints_prune(run_id=run.pk) == [] and runs_checkpoints_prune() == {}
    assert _on_disk(run) == [1, 2, 3]


def test_a_checkpoint_path_outside_the_runs_own_folder_is_never_deleted(tmp_path):
    run = _ended_run(keep_last=1, steps=2)
    elsewhere = tmp_path / "not-the-runs"
    elsewhere.mkdir()
    run.checkpoints.filter(step_index=1).update(path=str(elsewhere))

    assert run_checkpoints_prune(run_id=run.pk) == [1]
    assert elsewhere.is_dir()


def test_the_launch_form_freezes_the_sites_default_or_the_persons_choice_into_the_run(client, settings):
    settings.STUDIO_CHECKPOINT_KEEP_LAST = 4
    project = project_factory()
    agent = agent_factory(project=project, environment_options={"exact_match": True})
    scenarios = scenario_set_factory(project=project)
    client.force_login(project.owner)
    form = client.get(f"/projects/{project.pk}/runs/new/").content.decode()
    assert 'name="keep_checkpoints"' in form and 'value="4"' in form
    base = {"name": "r", "agent": agent.pk, "scenario_set": scenarios.pk, "steps": 2, "group_size": 2,
            "groups_per_step": 1, "learning_rate": 1e-3, "seed": 0, "kind": "grpo"}

    for name, keep in (("chosen", 1), ("default", "")):
        answer = client.post(f"/projects/{project.pk}/runs/new/", {**base, "name": name, "keep_checkpoints": keep})
        assert answer.status_code == 302, answer.content.decode()[-3000:]

    kept = {r.name: r.config["retention"] for r in project.runs.all()}
    assert kept == {"chosen": {"keep_last": 1, "keep_best": True}, "default": {"keep_last": 4, "keep_best": True}}


@pytest.mark.django_db(transaction=True)
def test_the_worker_deletes_what_the_policy_does_not_keep_as_the_run_ends(scripted_engine, client):
    agent = agent_factory(project=project_factory(), environment_options={"exact_match": True})
    run = run_factory(project=agent.project, agent=agent, steps=3, overrides={"retention": {"keep_last": 1}})

    runs_execute_in_order(worker="test@slot")

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert _rows(run) == [3] and sorted(p.name for p in Path(run.output_dir).glob("[0-9]*")) == ["0003"]
    client.force_login(run.project.owner)
    assert "Deleted after the run: steps 1, 2" in client.get(f"/runs/{run.pk}/").content.decode()
