"""Monitor alerts and held-out evaluations in the web app: a pausing alert pauses the run with its reason (as a
spent judge budget does), the run page shows the win-rate curve, the alerts and the checkpoint table."""
from __future__ import annotations

import pytest

from tests.webapp.conftest import wait_for
from tests.webapp.factories import agent_factory, project_factory, scenario_set_factory
from webapp.execution.executors import wait_idle
from webapp.live.ingest import run_event_ingest
from webapp.models import Run, RunStatus
from webapp.services import runs as run_services

pytestmark = pytest.mark.django_db(transaction=True)


def _launch(project, **options) -> Run:
    agent = agent_factory(project=project, environment_options=options)
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
    assert "paused by the length monitor at step 2: answer length grew 3.5x" in run.phase
    assert run.steps_done == 2
    alert = run.events.get(kind="monitor_alert").payload
    assert alert["monitor"] == "length" and alert["pause"] is True
    run_services.run_resume(user=project.owner, run=run)
    wait_idle(timeout=60)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.steps_done == 4


def _evaluation(step: int, win_rate: float) -> dict:
    return {"kind": "evaluation", "step": step, "model": f"r@{step}", "baseline": "base",
            "metrics": {"eval_win_rate": win_rate, "eval_ci_low": win_rate - 0.1, "eval_ci_high": win_rate + 0.1,
                        "eval_comparisons": 64, "eval_env_checkpoint": 0.5, "eval_env_base": 0.2},
            "scenarios": []}


def test_the_run_page_shows_the_win_rate_curve_alerts_escaped_and_the_best_checkpoint(client):
    project = project_factory()
    run = _launch(project)
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
