"""A run with several training processes: the worker starts them through torchrun, rank 0 reports for the run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.webapp.factories import run_factory
from webapp.execution.runner import run_execute
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_with_two_training_processes_trains_under_torchrun_and_reports_once(tiny_run, settings):
    settings.STUDIO_ENGINE_THREADS = 1
    run = tiny_run(steps=2, overrides={"trainer": {"distributed": "ddp", "processes": 2}})
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
    # A step trains exactly when one of its groups has a reward spread (the tiny player's four games sometimes all
    # score alike in both groups: that step is skipped, and says so with 0).
    spread = {k: run.groups.filter(step_index=k, skipped=False).exists() for k in (1, 2)}
    assert any(spread.values())
    assert all((m["trained_sequences"] > 0) == spread[m["step"]] for m in finished)


def test_a_distributed_run_that_does_not_say_how_many_processes_fails_at_once(settings, scripted_engine):
    run = run_factory(overrides={"trainer": {"distributed": "ddp"}})
    assert run_execute(run_id=run.id, worker="cpu@test") == RunStatus.FAILED
    run.refresh_from_db()
    assert "trainer.processes" in run.error
    assert not run.events.filter(kind="run_started").exists()
