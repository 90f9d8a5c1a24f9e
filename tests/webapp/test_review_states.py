"""Review states from one source (issue 48 item 5): answer cards, the pending-scores banner, the audit trail and
the API say the same thing about a step that has not trained (webapp/review_state.py), whatever the run's state;
a person's Pause is never dropped, and the header says "Pausing" until the engine holds. The runs that need an
engine use the scripted one, whose moments a test can wait for."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from tests.webapp.conftest import run_story, wait_for
from tests.webapp.factories import agent_factory, project_factory, run_factory, scenario_set_factory
from tests.webapp.test_review import _api, _group
from webapp.execution.executors import wait_idle
from webapp.models import Run, RunStatus
from webapp.models.runs import PARKED
from webapp.services.review import run_review_approve, trajectory_override
from webapp.services.runs import run_cancel, run_launch, run_pause, run_resume


def _scored_step_2_with_a_human_score(**fields) -> tuple[Run, int]:
    """Step 1 trained (checkpoint 1); step 2 scored, and a person scored its answer B 0.99."""
    run = run_factory(steps_done=1, reviewed_through_step=1, **fields)
    run.checkpoints.create(step_index=1, path="ckpt-1", adapter_name="test-run@1")
    t = _group(run, step=2, scores=[0.2, 0.4])[1]
    trajectory_override(user=run.project.owner, trajectory=t, score=0.99, reason="B is right")
    return Run.objects.get(pk=run.pk), t.id


def _card_note(client, run: Run, trajectory_id: int) -> tuple[str, str]:
    """The run page, and the API's note for the trajectory."""
    client.force_login(run.project.owner)
    page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    return page, _api(run.project.owner).get(f"/api/trajectories/{trajectory_id}/").json()["review"]["note"]


@pytest.mark.django_db
@pytest.mark.parametrize("fields, says", [
    ({"status": RunStatus.PAUSED, "worker": PARKED},  # parked: its engine stopped, Resume redoes step 2
     "not trained: Resume rolls step 2 out again, so 0.990 does not train"),
    ({"status": RunStatus.FAILED}, "not trained: Resume rolls step 2 out again, so 0.990 does not train"),
    ({"status": RunStatus.AWAITING_REVIEW, "worker": PARKED, "review_gate": True},  # kept at its review
     "not trained yet: waits for review; Approve trains step 2 on 0.990"),
    ({"status": RunStatus.CANCELLED}, "never trained: the run ended before this step trained"),
])
def test_a_step_that_has_not_trained_says_on_its_cards_and_in_the_api_what_resume_or_approve_will_do(
        client, fields, says):
    run, tid = _scored_step_2_with_a_human_score(**fields)
    page, api_note = _card_note(client, run, tid)
    assert api_note.startswith(says)
    assert says in page.replace("&#x27;", "'")  # the card's note, on the run page
    assert "the step will train on 0.990" not in page


@pytest.mark.django_db
def test_a_failed_run_warns_before_resume_that_its_pending_human_scores_are_rolled_out_again(client):
    run, _ = _scored_step_2_with_a_human_score(status=RunStatus.FAILED, error="the engine exited with code 1")
    client.force_login(run.project.owner)
    page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    banner = page.split('id="pending-overrides"')[1].split("</div>")[0]
    assert "1 human score on step 2 has not trained yet" in banner
    assert "This run failed: Resume starts again from the step 1 checkpoint and rolls that step out again" in banner
    audit = client.get(reverse("run-review", args=[run.id])).content.decode().split('id="audit"')[1]
    assert "pending: Resume rolls the step out again" in audit.split("</table>")[0]


def _launch(project, *, gate: bool, steps: int, phase_s: float) -> Run:
    agent = agent_factory(project=project, environment_options={"exact_match": True, "review": True,
                                                                "phase_s": phase_s})
    return run_launch(user=project.owner, project=project, name="states", agent=agent,
                      scenario_set=scenario_set_factory(project=project), steps=steps, group_size=2,
                      groups_per_step=2, learning_rate=1e-3, review_gate=gate)


def _at(run: Run, moment: str) -> None:
    marker = Path(run.output_dir) / "moment"
    wait_for(lambda: marker.exists() and marker.read_text() == moment, timeout=60, interval=0.02,
             message=f"the engine to reach {moment}", explain=lambda: run_story(run))


def _run(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


@pytest.mark.django_db(transaction=True)
def test_a_pause_clicked_seconds_after_approve_is_kept_and_resume_then_opens_the_next_steps_review(
        inprocess_executor, scripted_engine):
    run = _launch(project_factory(), gate=True, steps=2, phase_s=1.0)
    wait_for(lambda: _run(run).status == RunStatus.AWAITING_REVIEW, timeout=60, message="step 1's review",
             explain=lambda: run_story(run))
    run_review_approve(user=run.project.owner, run=_run(run))
    _at(run, "2:judging")  # step 1 trained; step 2 is being scored, its review not asked for yet
    run_pause(user=run.project.owner, run=_run(run))
    wait_for(lambda: run.events.filter(kind="review_requested", payload__step=2).exists(), timeout=60,
             message="step 2's review request", explain=lambda: run_story(run))

    paused = _run(run)
    assert paused.status == RunStatus.PAUSED, run_story(run)  # the pause was kept, not turned into a review
    assert paused.phase == "paused before step 2's review: Resume opens it"
    assert not run.events.filter(kind="review_applied", payload__step=2).exists()  # nothing trained unreviewed

    run_resume(user=run.project.owner, run=paused)
    assert _run(run).status == RunStatus.AWAITING_REVIEW and _run(run).phase == "step 2: waiting for review"
    run_review_approve(user=run.project.owner, run=_run(run))
    wait_idle(timeout=60)
    assert _run(run).status == RunStatus.COMPLETED, run_story(run)
    assert run.events.filter(kind="review_applied").count() == 2


@pytest.mark.django_db(transaction=True)
def test_after_pause_the_header_says_pausing_after_the_step_until_the_engine_holds(
        client, inprocess_executor, scripted_engine):
    run = _launch(project_factory(), gate=False, steps=3, phase_s=1.0)
    client.force_login(run.project.owner)
    header = reverse("run-header", args=[run.id])
    _at(run, "1:checkpoint")  # step 1 trains: its rewards were handed over
    run_pause(user=run.project.owner, run=_run(run))
    body = client.get(header).content.decode()
    assert 'id="run-status">Pausing<' in body and "pausing after step 1" in body

    wait_for(lambda: _run(run).phase == "paused after step 1", timeout=60, message="the engine to hold",
             explain=lambda: run_story(run))
    body = client.get(header).content.decode()
    assert 'id="run-status">Paused<' in body and "paused after step 1" in body
    assert _run(run).steps_done == 1 and (Path(run.output_dir) / "moment").read_text() == "2:rollouts"
    run_cancel(user=run.project.owner, run=_run(run))
    wait_idle(timeout=60)


@pytest.mark.django_db(transaction=True)
def test_a_pause_that_meets_the_engine_between_two_steps_says_paused_once_it_holds_not_pausing_forever(
        client, inprocess_executor, scripted_engine):
    """Step 1 finished and step 2 has not begun (the moment a held-out evaluation would run): no event of the
    steps follows before the engine holds, so only the engine's own word that it holds (run_held) ends "Pausing"."""
    run = _launch(project_factory(), gate=False, steps=3, phase_s=1.0)
    _at(run, "2:rollouts")  # step 1's events are all sent; the engine waits a phase before step 2's rollouts
    wait_for(lambda: _run(run).steps_done == 1, timeout=60, message="step 1 recorded", explain=lambda: run_story(run))
    run_pause(user=run.project.owner, run=_run(run))
    assert _run(run).phase.startswith("pausing")

    wait_for(lambda: _run(run).phase == "paused after step 1", timeout=60, message="the engine to hold",
             explain=lambda: f"phase {_run(run).phase!r}; {run_story(run)}")
    client.force_login(run.project.owner)
    body = client.get(reverse("run-header", args=[run.id])).content.decode()
    assert 'id="run-status">Paused<' in body
    held = run.events.filter(kind="run_held").values_list("payload", flat=True).get()
    assert (held["step"], held["trained"]) == (1, True)
    run_cancel(user=run.project.owner, run=_run(run))
    wait_idle(timeout=60)
