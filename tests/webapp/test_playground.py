"""The rubric playground against the judge double (real litellm over HTTP): rank changes, score deltas, agreement
with human labels beside the current version, cost and cache; saving the candidate as a new version; Celery."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.judge_double import JudgeDouble
from tests.webapp.conftest import wait_for
from tests.webapp.factories import judge_factory, member_factory, rubric_factory, run_factory
from tests.webapp.test_review import _group
from webapp.execution.executors import wait_idle
from webapp.models import Rescore, Role, RunStatus
from webapp.services.review import trajectory_override

pytestmark = pytest.mark.django_db(transaction=True)


def _api(user) -> APIClient:
    from rest_framework.authtoken.models import Token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def _labelled_run(judge_double: JudgeDouble):
    """One stored group whose judge preferred the long answer; a person preferred the short, faithful one."""
    run = run_factory(status=RunStatus.COMPLETED)
    project = run.project
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    rubric = rubric_factory(project=project, text="Prefer longer answers.")
    trajectories = _group(run, step=1, scores=[0.9, 0.6, 0.2], answers=[
        "Refunds are possible within 30 days of purchase, and also for 90 days as store credit via our hotline.",
        "Refunds within 30 days of purchase; digital products are non-refundable after download.",
        "Not sure, check the website."])
    for t, human in zip(trajectories, [0.3, 1.0, 0.0]):
        trajectory_override(user=project.owner, trajectory=t, score=human, reason="label")
    return run, judge, rubric, trajectories


def _candidate_judge(request) -> dict:
    """The candidate rubric 'prefers faithful answers': it scores the trajectory texts by what they contain."""
    def score(text: str) -> float:
        return 0.95 if "non-refundable" in text else 0.4 if "hotline" in text else 0.05

    return JudgeDouble.score_by(score)(request)


def test_a_playground_rescore_shows_rank_changes_deltas_agreement_and_cost_then_saves_a_version(
        judge_double, inprocess_executor, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    run, judge, rubric, (long, faithful, unsure) = _labelled_run(judge_double)
    judge_double.responder = _candidate_judge
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    body = {"project": run.project_id, "group_ids": [long.group_id], "judge_config": judge.id,
            "base_version": rubric.latest_version.id,
            "rubric_text": "Prefer faithful answers that use only the policy; penalise invented offers."}
    created = _api(reviewer).post("/api/playground/", body, format="json")
    assert created.status_code == 201, created.json()
    wait_idle(timeout=60)
    rescore = Rescore.objects.get(pk=created.json()["id"])
    assert rescore.status == "done", rescore.error
    assert "penalise invented offers" in judge_double.requests[0].prompt_text  # the candidate reached the judge
    rows = {t["id"]: t for t in rescore.results[0]["trajectories"]}
    assert [rows[t.id]["rank_current"] for t in (long, faithful, unsure)] == [1, 2, 3]
    assert [rows[t.id]["rank_new"] for t in (long, faithful, unsure)] == [2, 1, 3]
    assert rows[faithful.id]["delta"] == pytest.approx(0.95 - 0.6)
    assert rows[long.id]["delta"] == pytest.approx(0.4 - 0.9)
    s = rescore.summary
    # Human 0.3 / 1.0 / 0.0. Current (0.9, 0.6, 0.2): the pair (long, faithful) is reversed → 2/3, τ = 1/3.
    # Candidate (0.4, 0.95, 0.05): every pair as the human → 1.
    assert s["current_vs_human"]["pairwise"] == pytest.approx(2 / 3)
    assert s["current_vs_human"]["kendall_tau"] == pytest.approx(1 / 3)
    assert s["new_vs_human"]["pairwise"] == 1.0 and s["new_vs_human"]["kendall_tau"] == pytest.approx(1.0)
    assert s["rank_changes"] == 2 and s["calls"] == 1 and s["cache_hits"] == 0
    assert s["prompt_tokens"] == 120 and s["cost_usd"] is None  # the double's model has no price: unknown, not 0
    long.refresh_from_db()  # the run's own scores are never touched
    assert long.judge_score == 0.9 and long.override_score == 0.3

    again = _api(reviewer).post("/api/playground/", body, format="json").json()
    wait_idle(timeout=60)
    repeat = Rescore.objects.get(pk=again["id"])
    assert repeat.summary["cache_hits"] == 1 and repeat.summary["groups_from_cache"] == 1
    assert len(judge_double.requests) == 1  # the same candidate on the same group never pays twice

    assert _api(reviewer).post(f"/api/playground/{rescore.id}/save-version/", {}, format="json").status_code == 403
    saved = _api(run.project.owner).post(f"/api/playground/{rescore.id}/save-version/", {}, format="json")
    assert saved.status_code == 201 and saved.json()["number"] == 2
    assert rubric.versions.get(number=2).text.startswith("Prefer faithful answers")


def test_a_viewer_cannot_start_a_rescore():
    run = run_factory(status=RunStatus.COMPLETED)
    t = _group(run, step=1, scores=[0.9, 0.2])[0]
    judge = judge_factory(project=run.project)
    viewer = member_factory(project=run.project, role=Role.VIEWER)
    response = _api(viewer).post("/api/playground/", {"project": run.project_id, "group_ids": [t.group_id],
                                                      "judge_config": judge.id, "rubric_text": "x"}, format="json")
    assert response.status_code == 403 and not Rescore.objects.exists()


def test_a_rescore_runs_on_the_celery_judge_queue(judge_double, start_celery_worker, settings, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    settings.STUDIO_EXECUTOR = "celery"
    start_celery_worker(queue="judge")
    run, judge, rubric, trajectories = _labelled_run(judge_double)
    judge_double.responder = _candidate_judge
    created = _api(run.project.owner).post("/api/playground/", {
        "project": run.project_id, "group_ids": [trajectories[0].group_id], "judge_config": judge.id,
        "rubric_text": "Prefer faithful answers."}, format="json").json()
    wait_for(lambda: Rescore.objects.get(pk=created["id"]).status in ("done", "failed"), timeout=60,
             message="the judge worker to finish the re-score")
    rescore = Rescore.objects.get(pk=created["id"])
    assert rescore.status == "done", rescore.error
    assert rescore.summary["new_vs_human"]["pairwise"] == 1.0 and len(judge_double.requests) == 1
