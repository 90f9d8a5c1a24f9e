"""Monitor alerts and held-out evaluations in the web app: a pausing alert pauses the run with its reason (as a
spent judge budget does), the run page shows the win-rate curve, the alerts and the checkpoint table."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.html import escape

from tests.webapp.conftest import wait_for
from tests.webapp.factories import agent_factory, project_factory, run_factory, scenario_set_factory
from training.fixtures.demo import HELD_OUT
from webapp.execution.executors import wait_idle
from webapp.live.ingest import run_event_ingest
from webapp.models import Run, RunStatus
from webapp.services import runs as run_services

pytestmark = pytest.mark.django_db(transaction=True)


def _launch(project, **options) -> Run:
    agent = agent_factory(project=project, environment_options={"exact_match": True, **options})  # no judge needed
    return run_services.run_launch(
        user=project.owner, project=project, name="monitored", agent=agent,
        scenario_set=scenario_set_factory(project=project), steps=4, group_size=2, groups_per_step=1,
        learning_rate=1e-3)


def test_a_pausing_monitor_alert_pauses_the_run_with_its_reason_and_resume_finishes_it(inprocess_executor,
                                                                                       scripted_engine):
    project = project_factory()
    run = _launch(project, alert_at_step=2, phase_s=0.1)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.PAUSED, message="the monitor to pause the run")
    run.refresh_from_db()
    time.sleep(1.0)  # the engine finishes the phase it was in, then holds: the reason stays
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.steps_done < 4
    assert "paused by the length monitor at step 2: answer length grew 3.5x" in run.phase
    alert = run.events.get(kind="monitor_alert").payload
    assert alert["monitor"] == "length" and alert["pause"] is True
    run_services.run_resume(user=project.owner, run=run)
    wait_idle(timeout=60)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.steps_done == 4


def _evaluation(step: int, win_rate: float, half_width: float = 0.1, scenarios: object = 4) -> dict:
    return {"kind": "evaluation", "step": step, "model": f"r@{step}", "baseline": "base",
            "metrics": {"eval_win_rate": win_rate, "eval_ci_low": win_rate - half_width,
                        "eval_ci_high": win_rate + half_width, "eval_comparisons": 64, "eval_scenarios": scenarios,
                        "eval_samples": 4, "eval_env_checkpoint": 0.5, "eval_env_base": 0.2},
            "scenarios": []}


def test_the_run_page_shows_the_win_rate_curve_alerts_escaped_and_the_best_checkpoint(client):
    project = project_factory()
    run = run_factory(project=project)  # a row only: nothing executes
    for step in (1, 2, 3):
        run_event_ingest(run_id=run.pk, event={"kind": "checkpoint_saved", "step": step, "path": f"/x/{step}",
                                               "adapter_name": f"r@{step}"})
    for step, rate in ((1, 0.55), (2, 0.81), (3, 0.7)):
        run_event_ingest(run_id=run.pk, event=_evaluation(step, rate))
    run_event_ingest(run_id=run.pk, event={"kind": "monitor_alert", "step": 3, "monitor": "repetition",
                                           "value": 0.8, "threshold": 0.5, "pause": False,
                                           "message": "<script>alert(1)</script> repeats"})
    client.force_login(project.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="eval-chart"' in page and 'id="monitor-chart"' in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; repeats" in page and "<script>alert(1)" not in page
    best = page.split('class="best"')[1].split("</tr>")[0]
    assert "step 2" in best and "81%" in best and "fork" in best and "download" in best


def test_the_checkpoint_table_calls_a_checkpoint_better_than_base_only_when_its_whole_band_is_above_half(client):
    project = project_factory()
    run = run_factory(project=project)  # a row only: nothing executes
    for step in (1, 2, 3, 4):
        run_event_ingest(run_id=run.pk, event={"kind": "checkpoint_saved", "step": step, "path": f"/x/{step}",
                                               "adapter_name": f"r@{step}"})
    # a high win rate on a wide band, a lower one on a narrow band, one below, and one with a hostile count
    run_event_ingest(run_id=run.pk, event=_evaluation(1, 0.7, half_width=0.25, scenarios=8))
    run_event_ingest(run_id=run.pk, event=_evaluation(2, 0.62, half_width=0.08, scenarios=24))
    run_event_ingest(run_id=run.pk, event=_evaluation(3, 0.3, half_width=0.1, scenarios=24))
    run_event_ingest(run_id=run.pk, event=_evaluation(4, 0.6, half_width=0.2, scenarios="<b>24</b>"))
    client.force_login(project.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    rows = page.split('id="checkpoint-table"')[1].split("<tbody>")[1].split("</tr>")
    assert "70%" in rows[0] and "45–95%" in rows[0] and "8 scenarios × 4 answers a side" in rows[0]
    assert "not distinguishable from base" in rows[0] and "better than base" not in rows[0]
    assert "62%" in rows[1] and "54–70%" in rows[1] and "24 scenarios × 4 answers a side" in rows[1]
    assert "better than base" in rows[1]
    assert "worse than base" in rows[2]
    assert "scenarios ×" not in rows[3] and "<b>24</b>" not in page  # only numbers are stored and shown
    data = json.loads(page.split('id="evaluation-data" type="application/json">')[1].split("</script>")[0])
    assert [(p["scenarios"], p["samples"], p["verdict"]) for p in data["curve"][:3]] == [
        (8, 4, "undecided"), (24, 4, "better"), (24, 4, "worse")]
    assert [p["ci_low"] for p in data["curve"][:2]] == pytest.approx([0.45, 0.54])  # the band drawn


def test_evaluate_now_runs_the_engines_evaluation_of_a_checkpoint_and_records_it(client, inprocess_executor,
                                                                               tiny_model_dir, tmp_path):
    from tests.training.configs import small_config
    from training import run as train_run

    project = project_factory()
    # The run as recorded: the held-out evaluation on the local server, which Evaluate now starts.
    config = small_config(tiny_model_dir, tmp_path / "run", steps=1, evaluation={"samples": 2}, device="cpu",
                          server={"kind": "local"})
    run = run_factory(project=project)  # a row only: nothing executes
    Run.objects.filter(pk=run.pk).update(config=config.model_dump(mode="json"), status=RunStatus.COMPLETED)
    events = []
    # Its checkpoint: a real step, trained in process and without the loop's own evaluation, so the only
    # evaluation there is is the one asked for below.
    train_run(small_config(tiny_model_dir, tmp_path / "run", steps=1, device="cpu"), sink=events.append)
    for e in events:
        if e.kind == "checkpoint_saved":
            run_event_ingest(run_id=run.pk, event=e.to_dict())
    assert not [e for e in events if e.kind == "evaluation"] and not run.events.filter(kind="evaluation").exists()
    checkpoint = run.checkpoints.get()

    client.force_login(project.owner)
    response = client.post(f"/checkpoints/{checkpoint.pk}/evaluate/")
    assert response.status_code == 302
    wait_idle(timeout=300)
    evaluation = run.events.get(kind="evaluation").payload
    assert evaluation["on_demand"] is True and evaluation["step"] == 1
    assert evaluation["metrics"]["eval_comparisons"] == HELD_OUT * 2 * 2  # the demo's held-out positions, 2 a side
    assert (evaluation["metrics"]["eval_scenarios"], evaluation["metrics"]["eval_samples"]) == (HELD_OUT, 2)
    assert 0.0 <= evaluation["metrics"]["eval_win_rate"] <= 1.0
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="best"' in page


def test_a_failed_evaluation_shows_its_reason_not_the_output_before_it(client, inprocess_executor, tiny_model_dir,
                                                                       tmp_path):
    from tests.training.configs import small_config

    project = project_factory()
    config = small_config(tiny_model_dir, tmp_path / "run", steps=1, evaluation={"samples": 2}, device="cpu",
                          server={"kind": "local"})  # the local server's refusal is what the page must show
    run = run_factory(project=project)  # a row only: nothing executes
    Run.objects.filter(pk=run.pk).update(config=config.model_dump(mode="json"), status=RunStatus.COMPLETED)
    broken = tmp_path / "run" / "checkpoints" / "step_0001"  # an adapter whose weights are not safetensors
    broken.mkdir(parents=True)
    (broken / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"],
                                                            "base_model_name_or_path": str(tiny_model_dir)}))
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    run_event_ingest(run_id=run.pk, event={"kind": "checkpoint_saved", "step": 1, "path": str(broken),
                                           "adapter_name": "monitored@1"})
    client.force_login(project.owner)
    client.post(f"/checkpoints/{run.checkpoints.get().pk}/evaluate/")
    wait_idle(timeout=300)
    (failure,) = run.events.filter(kind="evaluation_failed").values_list("payload", flat=True)
    error = failure["error"]
    # The engine's own message, one line, without the CLI's "error: " (output printed before it goes to the log).
    assert error.startswith("the inference server refused adapter") and "\n" not in error, error
    assert "Error while deserializing header" in error
    assert f"evaluation failed: {escape(error)[:100]}" in client.get(f"/runs/{run.pk}/").content.decode()


def test_the_reason_of_a_failed_evaluation_is_the_clis_error_line_else_the_last_line():
    from webapp.execution.evaluation import failure_reason

    noisy = "Loading weights: 100%|##########| 50/50\rwarning: slow tokenizer\nerror: the judge refused the key\n"
    assert failure_reason(noisy, 2) == "the judge refused the key"
    traceback = 'Traceback (most recent call last):\n  File "x.py", line 1\nOSError: no file named adapter.bin\n'
    assert failure_reason(traceback, 1) == "OSError: no file named adapter.bin"
    assert failure_reason("", -9) == "exit code -9"


def test_evaluate_now_needs_held_out_scenarios_and_an_editor(client, settings):
    settings.STUDIO_EXECUTOR = "inprocess"
    project = project_factory()
    run = run_factory(project=project)  # a row only: nothing executes
    run_event_ingest(run_id=run.pk, event={"kind": "checkpoint_saved", "step": 1, "path": "/x", "adapter_name": "r@1"})
    checkpoint = run.checkpoints.get()
    client.force_login(project.owner)
    page = client.post(f"/checkpoints/{checkpoint.pk}/evaluate/", follow=True).content.decode()
    assert "holds out no scenarios" in page and not run.events.filter(kind__startswith="evaluation").exists()
    from tests.webapp.factories import member_factory

    client.force_login(member_factory(project=project))
    assert client.post(f"/checkpoints/{checkpoint.pk}/evaluate/").status_code in (403, 404)


def test_a_run_paused_by_a_monitor_lets_a_queued_run_use_the_worker_and_resumes_from_its_checkpoint(
        inprocess_executor, scripted_engine):
    project = project_factory()
    paused = _launch(project, alert_at_step=1, phase_s=0.05)
    wait_for(lambda: Run.objects.get(pk=paused.pk).status == RunStatus.PAUSED, message="the monitor to pause the run")
    waiting = _launch(project, phase_s=0.05)
    wait_for(lambda: Run.objects.get(pk=waiting.pk).status == RunStatus.COMPLETED, timeout=60,
             message="the queued run to run while the other is paused")
    paused.refresh_from_db()
    # The engine holds at its next phase boundary after the alert (a step later at most on a busy machine).
    assert paused.status == RunStatus.PAUSED and 1 <= paused.steps_done < 4
    assert "paused by the length monitor at step 1" in paused.phase
    assert f"resume continues from the step {paused.steps_done} checkpoint" in paused.phase
    assert run_services.runs_reap_stale(now=timezone.now() + timedelta(days=1)) == []  # parked, not crashed
    run_services.run_resume(user=project.owner, run=paused)
    wait_for(lambda: Run.objects.get(pk=paused.pk).status == RunStatus.COMPLETED, timeout=60,
             message="the resumed run to finish")
    paused.refresh_from_db()
    assert paused.steps_done == 4 and paused.checkpoints.count() == 4
    assert paused.events.filter(kind="run_started", payload__resumed=True).exists()


def test_a_run_paused_while_its_step_checkpoints_parks_only_after_the_step_with_every_result_recorded(
        inprocess_executor, scripted_engine):
    from pathlib import Path

    project = project_factory()
    run = _launch(project, phase_s=0.5)
    moment = Path(run.output_dir) / "moment"
    wait_for(lambda: moment.exists() and moment.read_text() == "2:checkpoint", interval=0.02,
             message="step 2 to write its checkpoint")
    run_services.run_pause(user=project.owner, run=run)
    waiting = _launch(project, phase_s=0.05)
    wait_for(lambda: Run.objects.get(pk=waiting.pk).status == RunStatus.COMPLETED, timeout=60,
             message="the queued run to run while the other is parked")
    run.refresh_from_db()
    # Step 2 was neither cut before its checkpoint (redone on resume) nor after it (its results lost): the
    # engine stopped at the next phase boundary, and every step it finished is recorded with its metrics.
    assert run.status == RunStatus.PAUSED and run.steps_done == 2
    assert [(s.index, s.metrics["reward_mean"]) for s in run.steps.order_by("index")] == [(1, 0.4), (2, 0.5)]
    assert sorted(run.checkpoints.values_list("step_index", flat=True)) == [1, 2]
    assert "resume continues from the step 2 checkpoint" in run.phase
    assert not run.events.filter(kind="run_finished").exists()  # parked, not cancelled
    run_services.run_resume(user=project.owner, run=run)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED, timeout=60,
             message="the resumed run to finish")
    assert [s.index for s in run.steps.order_by("index")] == [1, 2, 3, 4]
    assert run.events.get(kind="run_started", payload__resumed=True).payload["start_step"] == 3


def test_a_parked_paused_run_is_cancelled_at_once(inprocess_executor, scripted_engine):
    project = project_factory()
    paused = _launch(project, alert_at_step=1, phase_s=0.05)
    wait_for(lambda: Run.objects.get(pk=paused.pk).status == RunStatus.PAUSED, message="the monitor to pause the run")
    waiting = _launch(project, phase_s=0.05)
    wait_for(lambda: Run.objects.get(pk=waiting.pk).status == RunStatus.COMPLETED, timeout=60,
             message="the queued run to finish")
    run_services.run_cancel(user=project.owner, run=Run.objects.get(pk=paused.pk))
    assert Run.objects.get(pk=paused.pk).status == RunStatus.CANCELLED
