"""No GPU waits on a person (issue 47): a run awaiting review gives its worker to the next queued run, and after
approval it goes back to the queue and trains the very groups that were reviewed, every override applied as
reviewed. On the embedded executor and on a Celery worker, with the scripted engine, which keeps its step at a
park as the real loop does (tests/training/test_parked_review.py shows the real loop's side)."""
from __future__ import annotations

import pytest

from tests.webapp.conftest import SCRIPTED_ENGINE, run_story, wait_for
from tests.webapp.factories import agent_factory, member_factory, project_factory, run_factory, scenario_set_factory
from webapp.execution.executors import wait_idle
from webapp.models import Role, Run, RunStatus, ScoreOverride, Trajectory
from webapp.models.runs import PARKED
from webapp.selectors.queue import queue_reason
from webapp.services.review import run_review_approve, trajectory_override
from webapp.services.runs import run_launch

pytestmark = pytest.mark.django_db(transaction=True)


def _run(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def _groups(run: Run) -> dict[tuple[int, int], list[int]]:
    """Each recorded group's trajectory ids: the same ids after the park mean nothing was rolled out again."""
    ids: dict[tuple[int, int], list[int]] = {}
    for step, index, tid in Trajectory.objects.filter(group__run=run).order_by("id").values_list(
            "group__step_index", "group__index", "id"):
        ids.setdefault((step, index), []).append(tid)
    return ids


def _override(run: Run, reviewer, *, group: int, index: int, score: float) -> None:
    trajectory = Trajectory.objects.get(group__run=run, group__step_index=1, group__index=group, index=index)
    trajectory_override(user=reviewer, trajectory=trajectory, score=score, reason="a person's judgement")


def _review_through_a_park(gated: Run, launch_next, overrides: list[tuple[int, int, float]], *,
                           timeout: float) -> tuple[Run, dict]:
    """The gated run waits for review and a reviewer overrides a score; the next run, launched meanwhile, takes
    the gated run's worker; a second override lands while the gated run is parked; approval queues it again.
    Returns the next run and the gated run's groups as they were before the park."""
    wait_for(lambda: _run(gated).status == RunStatus.AWAITING_REVIEW, timeout=timeout,
             message="the gate to hold the run", explain=lambda: run_story(gated))
    before = _groups(gated)
    reviewer = member_factory(project=gated.project, role=Role.REVIEWER)
    _override(gated, reviewer, group=overrides[0][0], index=overrides[0][1], score=overrides[0][2])
    following = launch_next()
    wait_for(lambda: _run(gated).worker == PARKED, timeout=timeout, message="the run awaiting review to park",
             explain=lambda: run_story(gated))
    parked = _run(gated)
    assert parked.status == RunStatus.AWAITING_REVIEW
    assert parked.phase == "step 1: waiting for review; its worker is free"
    wait_for(lambda: _run(following).status != RunStatus.QUEUED, timeout=timeout,
             message="the next run to start while the first waits for review", explain=lambda: run_story(following))
    _override(gated, reviewer, group=overrides[1][0], index=overrides[1][1], score=overrides[1][2])  # parked
    run_review_approve(user=reviewer, run=_run(gated))
    assert _run(gated).status == RunStatus.QUEUED
    return following, before


def _advantages(run: Run) -> list[list[float]]:
    return [list(Trajectory.objects.filter(group__run=run, group__index=g).order_by("index")
                 .values_list("advantage", flat=True)) for g in (0, 1)]


def _check_trained_as_reviewed(gated: Run, following: Run, before: dict) -> None:
    gated, following = _run(gated), _run(following)
    assert gated.status == RunStatus.COMPLETED and gated.checkpoints.count() == 1, gated.error
    assert following.status == RunStatus.COMPLETED and following.finished_at < gated.started_at
    assert _groups(gated) == before  # the reviewed groups trained: none was rolled out again
    assert gated.events.filter(kind="group_scored").count() == 2
    assert gated.events.filter(kind="review_applied").count() == 1
    overrides = list(ScoreOverride.objects.filter(run=gated))
    assert len(overrides) == 2 and all(o.applies_to_training and o.redo == "" for o in overrides)


def _launcher(project):
    def launch(name: str, gate: bool, phase_s: float = 0.05) -> Run:
        agent = agent_factory(project=project, environment_options={"exact_match": True, "review": True,
                                                                    "phase_s": phase_s})
        return run_launch(user=project.owner, project=project, name=name, agent=agent,
                          scenario_set=scenario_set_factory(project=project), steps=1, group_size=2,
                          groups_per_step=2, learning_rate=1e-3, review_gate=gate)

    return launch


# The scripted engine's step-1 rewards are [1/3, 2/3] in each group; its advantages are reward - mean. The
# overrides below set group 0's second answer to 0 and group 1's first to 1.
OVERRIDES = [(0, 1, 0.0), (1, 0, 1.0)]
REVIEWED = [[0.333, 0.0], [1.0, 0.667]]


def _assert_advantages_follow_the_review(run: Run) -> None:
    assert _advantages(run) == [pytest.approx([r - sum(rs) / 2 for r in rs], abs=1e-6) for rs in REVIEWED]


def test_a_run_awaiting_review_frees_its_worker_and_trains_every_reviewed_score_after_approval(
        inprocess_executor, scripted_engine):
    launch = _launcher(project_factory())
    gated = launch("gated", True)
    following, before = _review_through_a_park(gated, lambda: launch("next", False), OVERRIDES, timeout=60)
    wait_idle(timeout=60)

    _check_trained_as_reviewed(gated, following, before)
    _assert_advantages_follow_the_review(gated)


def test_on_a_celery_worker_a_run_awaiting_review_frees_its_worker_and_resumes_ahead_of_later_launches(
        start_celery_worker, settings):
    settings.STUDIO_EXECUTOR = "celery"
    start_celery_worker(SCRIPTED_ENGINE)
    launch = _launcher(project_factory())
    gated = launch("gated", True)
    # The next run takes a few seconds, so the approval and a later launch both queue while it holds the worker.
    following, before = _review_through_a_park(gated, lambda: launch("next", False, phase_s=1.0), OVERRIDES,
                                               timeout=60)
    later = launch("later", False)
    assert _run(following).status == RunStatus.RUNNING  # so both wait for the same free slot
    wait_for(lambda: _run(later).status == RunStatus.COMPLETED, timeout=60, message="every run to complete",
             explain=lambda: run_story(later))

    _check_trained_as_reviewed(gated, following, before)
    assert _run(gated).started_at < _run(later).started_at  # the approved run went ahead of the later launch
    _assert_advantages_follow_the_review(gated)


def test_a_queued_run_says_which_run_holds_the_worker_and_how_many_wait_ahead_of_it():
    project = project_factory()
    busy = run_factory(project=project, name="busy", status=RunStatus.RUNNING, worker="w1")
    parked = run_factory(project=project, name="parked", status=RunStatus.AWAITING_REVIEW, worker=PARKED)
    first = run_factory(project=project, name="first", phase="waiting for a worker")
    second = run_factory(project=project, name="second", phase="waiting for a worker")
    run_factory(status=RunStatus.PAUSED, worker="w2")  # another project's

    assert queue_reason(run=second) == (f"waiting for a worker: run #{busy.pk} is training; a run of another "
                                        "project is paused (its engine holds the worker); 1 queued ahead of it")
    assert queue_reason(run=first).endswith("(its engine holds the worker)")
    assert str(parked.pk) not in queue_reason(run=first)  # a parked run holds no worker


def test_a_run_parked_at_its_review_is_left_alone_by_the_reaper_and_cancel_ends_it_at_once():
    from datetime import timedelta

    from django.utils import timezone

    from webapp.services.runs import run_cancel, runs_reap_stale

    project = project_factory()
    parked = run_factory(project=project, status=RunStatus.AWAITING_REVIEW, worker=PARKED,
                         heartbeat_at=timezone.now() - timedelta(hours=1))  # no engine beats for it

    assert runs_reap_stale() == [] and _run(parked).status == RunStatus.AWAITING_REVIEW
    run_cancel(user=project.owner, run=_run(parked))
    assert _run(parked).status == RunStatus.CANCELLED
