"""A run with several training processes: the worker starts them through torchrun, rank 0 reports for the run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.judge_double import JudgeDouble
from tests.webapp.factories import judge_factory, project_factory, rubric_factory, run_factory
from webapp.execution.runner import run_execute
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_with_two_training_processes_trains_under_torchrun_and_reports_once(tiny_run, settings, judge_double):
    settings.STUDIO_ENGINE_THREADS = 1
    # The judge prefers whichever game it reads first: every group has a reward spread, so every step trains (the
    # tiny player's own games sometimes all score alike, and a step of such groups is skipped).
    judge_double.responder = JudgeDouble.prefer_first(lambda text: 0.0, bonus=1.0)
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base)
    rubric = rubric_factory(project=project)
    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cpu", "trainer": {"distributed": "ddp", "processes": 2}}
    run = tiny_run(steps=2, project=project, judge_config=judge, rubric_version=rubric.latest_version)
    assert run_execute(run_id=run.id, worker="cpu@test") == RunStatus.COMPLETED, run.error
    run.refresh_from_db()
    kinds = list(run.events.values_list("kind", flat=True))
    assert kinds.count("run_started") == 1 and kinds.count("step_finished") == 2  # rank 0 alone reports
    assert kinds.count("group_scored") == 4
    assert sorted(run.checkpoints.values_list("step_index", flat=True)) == [1, 2]
    # Every rank read the run's own settings (torchrun passes no pipe on, so the spec is a file).
    spec = json.loads((Path(run.output_dir) / "engine-spec.json").read_text())
    assert spec["config"]["trainer"] == run.config["trainer"]
    # The step records reached the database from rank 0's stdout, whole: nothing else was mixed into it.
    finished = [e.payload["metrics"] for e in run.events.filter(kind="step_finished").order_by("seq")]
    assert [m["step"] for m in finished] == [1, 2]
    assert not run.groups.filter(skipped=True).exists()
    assert all(m["trained_sequences"] == 2 * 4 for m in finished)  # two groups of four games a step, all trained


def test_a_distributed_run_that_does_not_say_how_many_processes_fails_at_once(settings, scripted_engine):
    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cpu", "trainer": {"distributed": "ddp"}}
    run = run_factory()
    assert run_execute(run_id=run.id, worker="cpu@test") == RunStatus.FAILED
    run.refresh_from_db()
    assert "trainer.processes" in run.error
    assert not run.events.filter(kind="run_started").exists()
