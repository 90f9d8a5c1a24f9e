"""Review without a running engine: overrides and their audit trail, reorders, labels after training, the review
queue, agreement against hand-computed values, side by side with a diff, forks, and who may do what."""
from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import (
    judge_factory, member_factory, rubric_factory, run_factory, user_factory,
)
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Role, Run, RunStatus, ScoreOverride, Trajectory, TrajectoryGroup
from webapp.models.runs import AppendOnlyError
from webapp.services.review import run_review_rewards, trajectory_override

pytestmark = pytest.mark.django_db


def _api(user) -> APIClient:
    from rest_framework.authtoken.models import Token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def _group(run: Run, *, step: int, index: int = 0, scores: list[float], answers: list[str] | None = None,
           explanations: list[str] | None = None, skipped: bool = False, judge_meta: dict | None = None
           ) -> list[Trajectory]:
    """Ingests a scored group as the engine reports it; returns its trajectories in rollout order."""
    answers = answers or [f"answer {i}" for i in range(len(scores))]
    records = [{"scenario_id": f"s{index + 1}", "messages": [{"role": "user", "content": "Refund policy?"},
                                                             {"role": "assistant", "content": a}],
                "reward": sc, "judge_score": sc, "explanation": (explanations or [""] * len(scores))[i],
                "criteria": {}, "metadata": {"judge": judge_meta} if judge_meta and i == 0 else {},
                "advantage": 0.0}
               for i, (sc, a) in enumerate(zip(scores, answers))]
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": step, "group_index": index,
                                           "scenario_id": f"s{index + 1}", "trajectories": records,
                                           "reward_mean": sum(scores) / len(scores), "reward_std": 0.1,
                                           "skipped": skipped})
    return list(Trajectory.objects.filter(group__run=run, group__step_index=step, group__index=index)
                .order_by("index"))


def test_an_override_keeps_the_judge_score_and_every_change_is_audited():
    run = run_factory(status=RunStatus.RUNNING)
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    t = _group(run, step=1, scores=[0.9, 0.2])[1]
    trajectory_override(user=reviewer, trajectory=t, score=0.95, reason="cites the 30-day policy")
    trajectory_override(user=reviewer, trajectory=t, score=0.7, reason="on reflection, too long")
    trajectory_override(user=reviewer, trajectory=t, score=None, reason="the judge was right")
    t.refresh_from_db()
    assert t.judge_score == 0.2 and t.override_score is None and t.effective_reward == 0.2
    trail = list(ScoreOverride.objects.filter(trajectory=t).order_by("id").values_list(
        "kind", "before", "after", "judge_score", "reason", "user__username", "applies_to_training"))
    assert trail == [("score", None, 0.95, 0.2, "cites the 30-day policy", reviewer.username, True),
                     ("score", 0.95, 0.7, 0.2, "on reflection, too long", reviewer.username, True),
                     ("clear", 0.7, None, 0.2, "the judge was right", reviewer.username, True)]
    record = ScoreOverride.objects.first()
    record.reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        record.save()
    with pytest.raises(AppendOnlyError):
        record.delete()


def test_an_override_needs_a_reason_and_a_score_in_range():
    run = run_factory(status=RunStatus.RUNNING)
    t = _group(run, step=1, scores=[0.9, 0.2])[0]
    api = _api(run.project.owner)
    assert api.post(f"/api/trajectories/{t.id}/override/", {"score": 1.5, "reason": "x"}, format="json").status_code == 400
    assert api.post(f"/api/trajectories/{t.id}/override/", {"score": 0.5, "reason": " "}, format="json").status_code == 400
    ok = api.post(f"/api/trajectories/{t.id}/override/", {"score": 0.5, "reason": "too verbose"}, format="json")
    assert ok.status_code == 201 and ok.json()["after"] == 0.5 and ok.json()["judge_score"] == 0.9
    assert [o["reason"] for o in api.get(f"/api/runs/{run.id}/overrides/").json()["results"]] == ["too verbose"]


def test_reordering_a_group_reassigns_its_own_scores_in_the_new_order():
    run = run_factory(status=RunStatus.RUNNING)
    a, b, c = _group(run, step=1, scores=[0.9, 0.5, 0.1])
    records = _api(run.project.owner).post(f"/api/groups/{a.group_id}/reorder/",
                                           {"order": [c.id, a.id, b.id], "reason": "c is the only faithful one"},
                                           format="json").json()
    assert {r["trajectory"]: r["after"] for r in records} == {c.id: 0.9, a.id: 0.5, b.id: 0.1}
    assert all(r["kind"] == "reorder" for r in records)
    assert [t.override_score for t in Trajectory.objects.filter(pk__in=[a.id, b.id, c.id]).order_by("index")] == [
        0.5, 0.1, 0.9]


def test_overrides_reach_the_engine_until_the_step_is_handed_over_and_are_labels_after():
    run = run_factory(status=RunStatus.RUNNING)
    first, second = _group(run, step=1, scores=[0.9, 0.2])
    trajectory_override(user=run.project.owner, trajectory=second, score=1.0, reason="better")
    assert run_review_rewards(run_id=run.id, step=1) == {"step": 1, "rewards": {"0": [0.9, 1.0]}}
    late = trajectory_override(user=run.project.owner, trajectory=first, score=0.0, reason="wrong after all")
    assert late.applies_to_training is False
    assert Run.objects.get(pk=run.pk).reviewed_through_step == 1
    page = Trajectory.objects.get(pk=first.pk)
    assert page.override_score == 0.0  # still a label for agreement and the playground


def test_agreement_matches_hand_computed_values():
    run = run_factory(status=RunStatus.RUNNING)
    owner = run.project.owner
    g1 = _group(run, step=1, scores=[0.9, 0.7, 0.4, 0.1])
    for t, human in zip(g1, [0.8, 0.2, 0.5]):  # the fourth stays unlabelled: left out
        trajectory_override(user=owner, trajectory=t, score=human, reason="label")
    g2 = _group(run, step=2, scores=[0.2, 0.6])
    for t, human in zip(g2, [0.9, 0.1]):
        trajectory_override(user=owner, trajectory=t, score=human, reason="label")
    _group(run, step=2, index=1, scores=[0.3, 0.5])  # no labels: not counted
    # Step 1 by hand: pairs (1,2) agree, (1,3) agree, (2,3) disagree → 2/3; ranks judge [3,2,1] vs human [3,1,2]
    # → ρ = 1/2; τ = (2 − 1)/3. Step 2: reversed → 0, −1, −1. Overall: 2/4 pairs; means of ρ and τ.
    data = _api(owner).get(f"/api/runs/{run.id}/agreement/").json()
    assert data["overall"]["pairwise"] == pytest.approx(0.5)
    assert data["overall"]["spearman"] == pytest.approx((0.5 - 1) / 2)
    assert data["overall"]["kendall_tau"] == pytest.approx((1 / 3 - 1) / 2)
    assert data["overall"]["groups"] == 2 and data["overall"]["labels"] == 5
    step1, step2 = data["steps"]
    assert (step1["step"], step1["pairwise"], step1["spearman"], step1["kendall_tau"]) == (
        1, pytest.approx(2 / 3), pytest.approx(0.5), pytest.approx(1 / 3))
    assert (step2["pairwise"], step2["spearman"], step2["kendall_tau"]) == (0.0, pytest.approx(-1), pytest.approx(-1))


def test_the_review_page_shows_agreement_the_queue_and_the_audit_trail(client):
    run = run_factory(status=RunStatus.RUNNING)
    tied = _group(run, step=1, index=0, scores=[0.61, 0.6, 0.1])
    _group(run, step=1, index=1, scores=[0.5, 0.5], skipped=True)
    _group(run, step=1, index=2, scores=[0.9, 0.3], judge_meta={"passes": 3, "disagreement": 0.2})
    _group(run, step=1, index=3, scores=[0.95, 0.2], explanations=["Faithful.", "Correct and complete."])
    calm = _group(run, step=1, index=4, scores=[0.9, 0.1], explanations=["Faithful and brief.", "Adds a hotline."])
    for t, human in zip(tied, [0.2, 0.9, 0.1]):
        trajectory_override(user=run.project.owner, trajectory=t, score=human, reason="label")
    client.force_login(run.project.owner)
    page = client.get(reverse("run-review", args=[run.id])).content.decode()
    queue = page.split('id="review-queue"')[1].split("</table>")[0]
    assert "zero variance" in queue and "judge passes disagree" in queue
    assert f'href="/groups/{tied[0].group_id}/"' not in queue  # a near-tie alone orders, it does not flag
    assert "explanation sounds positive (“Correct”) for a low score 0.20" in page
    assert f'href="/groups/{calm[0].group_id}/"' not in page  # nothing to flag there
    assert 'id="agree-pairwise">0.667<' in page  # (1,2) disagree, (1,3) and (2,3) agree
    # Step 1 has not trained: the changes will reach its rewards, and the audit says so (not that they did).
    assert page.count("label only") == 0 and page.count("changed the step&#x27;s rewards") == 0
    assert page.count("pending: the step has not trained yet and will train on it") == 3


def test_side_by_side_diffs_the_final_answers_and_escapes_model_output(client):
    run = run_factory(status=RunStatus.RUNNING)
    a, b = _group(run, step=1, scores=[0.9, 0.3], answers=[
        "Refunds within 30 days of purchase.", "Refunds within 90 days <script>alert(1)</script> of purchase."])
    client.force_login(run.project.owner)
    page = client.get(reverse("run-compare", args=[run.id]) + f"?t={a.id}&t={b.id}").content.decode()
    assert "<del>30</del><ins>90</ins>" in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    columns = _api(run.project.owner).get(f"/api/runs/{run.id}/compare/?t={a.id}&t={b.id}").json()["results"]
    assert ["del", "30"] in columns[1]["diff"] and ["ins", "90"] in columns[1]["diff"]


def test_a_group_page_links_its_neighbours_for_keyboard_navigation_and_a_scenario_spans_steps(client):
    run = run_factory(status=RunStatus.RUNNING)
    first = _group(run, step=1, scores=[0.9, 0.3], answers=["old best", "old worst"])
    middle = _group(run, step=1, index=1, scores=[0.5, 0.4])
    last = _group(run, step=2, scores=[0.2, 0.8], answers=["new worst", "new best"])
    client.force_login(run.project.owner)
    page = client.get(reverse("group-detail", args=[middle[0].group_id])).content.decode()
    assert f'data-prev="/groups/{first[0].group_id}/"' in page and f'data-next="/groups/{last[0].group_id}/"' in page
    across = client.get(reverse("run-scenario", args=[run.id, "s1"])).content.decode()
    assert across.index("old best") < across.index("new best") and "old worst" not in across


def test_a_fork_starts_from_the_checkpoint_with_the_changed_rubric(client, judge_double):
    parent = run_factory(status=RunStatus.COMPLETED, review_gate=False)
    project = parent.project
    parent.agent.base_model, parent.agent.system_prompt = "another/model", "A new prompt."  # edited since
    parent.agent.save()
    checkpoint = Checkpoint.objects.create(run=parent, step_index=2, path="/tmp/ckpt/0002", adapter_name="p@2")
    rubric = rubric_factory(project=project, text="Only the context counts.")
    judge = judge_factory(project=project, api_base=judge_double.api_base)
    judge_double.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                   {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})  # launch's test
    response = _api(project.owner).post(f"/api/runs/{parent.id}/fork/", {
        "step": 2, "name": "fork", "rubric_version": rubric.latest_version.id, "judge_config": judge.id,
        "steps": 3, "review_gate": True}, format="json")
    assert response.status_code == 201, response.json()
    fork = Run.objects.get(pk=response.json()["id"])
    assert fork.config["init_checkpoint"] == "/tmp/ckpt/0002" and fork.parent_checkpoint == checkpoint
    assert fork.config["judge"]["rubric"] == "Only the context counts." and fork.review_gate
    assert fork.config["grpo"]["group_size"] == parent.config["grpo"]["group_size"]
    # The adapter belongs to the model the parent trained, not to what the agent was edited to afterwards.
    assert (fork.config["base_model"], fork.config["system_prompt"]) == (
        parent.config["base_model"], parent.config["system_prompt"]) != ("another/model", "A new prompt.")
    client.force_login(project.owner)
    form = client.get(reverse("run-fork", args=[checkpoint.id]))
    assert form.status_code == 200 and b"Fork test-run from step 2" in form.content
    assert f'href="/checkpoints/{checkpoint.id}/fork/"'.encode() in client.get(
        reverse("run-checkpoints", args=[parent.id])).content


def test_a_viewer_cannot_override_reorder_or_approve():
    run = run_factory(status=RunStatus.AWAITING_REVIEW)
    t = _group(run, step=1, scores=[0.9, 0.2])[0]
    viewer = member_factory(project=run.project, role=Role.VIEWER)
    api = _api(viewer)
    assert api.post(f"/api/trajectories/{t.id}/override/", {"score": 0.1, "reason": "x"}, format="json").status_code == 403
    assert api.post(f"/api/groups/{t.group_id}/reorder/", {"order": [t.id], "reason": "x"}, format="json").status_code == 403
    assert api.post(f"/api/runs/{run.id}/approve/").status_code == 403
    client = APIClient()
    client.force_login(viewer)
    assert client.post(reverse("trajectory-override", args=[t.id]), {"score": "0.1", "reason": "x"}).status_code == 403
    assert client.post(reverse("run-approve", args=[run.id])).status_code == 403
    assert not ScoreOverride.objects.exists() and Run.objects.get(pk=run.pk).status == RunStatus.AWAITING_REVIEW


def test_a_reviewer_overrides_and_approves_but_cannot_change_configs():
    run = run_factory(status=RunStatus.AWAITING_REVIEW)
    t = _group(run, step=1, scores=[0.9, 0.2])[0]
    Checkpoint.objects.create(run=run, step_index=1, path="/tmp/x", adapter_name="r@1")
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    api = _api(reviewer)
    assert api.post(f"/api/trajectories/{t.id}/override/", {"score": 0.1, "reason": "x"}, format="json").status_code == 201
    assert api.post(f"/api/runs/{run.id}/approve/").status_code == 200
    assert api.post(f"/api/runs/{run.id}/fork/", {"step": 1, "name": "f"}, format="json").status_code == 403
    assert api.post("/api/runs/", {"project": run.project_id, "name": "x", "agent": run.agent_id,
                                   "scenario_set": run.scenario_set_id}, format="json").status_code == 403
    assert api.patch(f"/api/agents/{run.agent_id}/", {"name": "renamed"}, format="json").status_code == 403
    assert api.post(f"/api/runs/{run.id}/pause/").status_code == 403
    client = APIClient()
    client.force_login(reviewer)
    checkpoint = run.checkpoints.get()
    assert client.get(reverse("run-fork", args=[checkpoint.id])).status_code == 403
    assert client.get(reverse("run-launch", args=[run.project_id])).status_code == 403
    assert Run.objects.count() == 1 and Run.objects.get(pk=run.pk).agent.name != "renamed"


def test_a_non_member_gets_404_from_every_review_page_and_endpoint(client):
    run = run_factory(status=RunStatus.AWAITING_REVIEW)
    t = _group(run, step=1, scores=[0.9, 0.2])[0]
    stranger = user_factory()
    client.force_login(stranger)
    for url in [reverse("run-review", args=[run.id]), reverse("run-compare", args=[run.id]) + f"?t={t.id}",
                reverse("run-scenario", args=[run.id, "s1"]), reverse("playground", args=[run.project_id])]:
        assert client.get(url).status_code == 404, url
    assert client.post(reverse("trajectory-override", args=[t.id]), {"score": "0.1", "reason": "x"}).status_code == 404
    api = _api(stranger)
    for url in [f"/api/runs/{run.id}/agreement/", f"/api/runs/{run.id}/review-queue/", f"/api/runs/{run.id}/overrides/",
                f"/api/trajectories/{t.id}/overrides/"]:
        assert api.get(url).status_code == 404, url
    assert api.post(f"/api/trajectories/{t.id}/override/", {"score": 0.1, "reason": "x"}, format="json").status_code == 404
    assert api.post(f"/api/runs/{run.id}/approve/").status_code == 404
    assert not ScoreOverride.objects.exists() and TrajectoryGroup.objects.count() == 1
