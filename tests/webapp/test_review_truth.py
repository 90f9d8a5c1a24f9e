"""Issue 18: every page, the API and the export tell the same truth about a reviewed group: the judge's
explanations in the page's labels, `reward` meaning the reward that trains, the export carrying the review, and
ranks and group means following the human input."""
from __future__ import annotations

import asyncio

import pytest

from studio.scoring import judge_scorer_from_config
from tests.judge_double import JudgeDouble
from tests.webapp.factories import PASSWORD, run_factory
from training.config import GRPOConfig
from training.events import JudgeUsage
from training.rl.groups import group_event, score_group
from training.types import Scenario, Trajectory as EngineTrajectory, TrajectoryGroup as EngineGroup
from webapp.live.ingest import run_event_ingest
from webapp.models import Run, RunEvent, RunStatus, Trajectory

pytestmark = pytest.mark.django_db


def _login(client, user):
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _api(user):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(user)
    return api


def _naming_judge(request):
    """A judge that explains by its own (shuffled) numbers, as real judges do: "Attempt 2 beats attempt 1"."""
    blocks = request.trajectory_blocks()
    scores = {tid: float(text.rsplit("quality ", 1)[1].split()[0]) for tid, text in blocks.items()}
    best = max(scores, key=scores.get)
    return {"scores": [{"trajectory_id": tid, "score": s, "explanation": f"Attempt {tid}; the best is attempt {best}."}
                       for tid, s in scores.items()]}


def _judged_group(run, double: JudgeDouble, qualities: list[float]) -> list[Trajectory]:
    """One group scored the way a real run scores it (the judge scorer, the loop's scoring, its two events)."""
    scenario = Scenario(id="s1", user_message="Refund policy?")
    group = EngineGroup(scenario=scenario, trajectories=[
        EngineTrajectory(scenario_id="s1", messages=[{"role": "user", "content": "Refund policy?"},
                                                     {"role": "assistant", "content": f"answer quality {q:.2f}"}])
        for q in qualities])
    scorer = judge_scorer_from_config({"judge_model": double.model, "api_base": double.api_base,
                                       "api_key_env": "JUDGE_DOUBLE_API_KEY"})
    asyncio.run(score_group(group, scorer, GRPOConfig(group_size=len(qualities))))
    run_event_ingest(run_id=run.id, event=group_event(1, 0, group).to_dict())
    run_event_ingest(run_id=run.id, event=JudgeUsage(step=1, group_index=0, report=group.judge_report).to_dict())
    return list(Trajectory.objects.filter(group__run=run).order_by("index"))


def test_a_real_runs_explanations_use_the_page_labels_everywhere(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    judge_double.responder = _naming_judge
    run = run_factory(status=RunStatus.RUNNING)
    # B and D are the same answer: the judge is shown it once, and each copy must still name itself.
    a, b, c, d = _judged_group(run, judge_double, [0.3, 0.9, 0.6, 0.9])
    shown = judge_double.requests[0].trajectory_blocks()
    assert "quality 0.30" not in shown["1"]  # the judge's numbering is not the page's order
    expected = {a.id: "Attempt A; the best is attempt B/D.", b.id: "Attempt B; the best is attempt B.",
                c.id: "Attempt C; the best is attempt B/D.", d.id: "Attempt D; the best is attempt D."}
    _login(client, run.project.owner)
    pages = {"run": client.get(f"/runs/{run.id}/").content.decode(),
             "group": client.get(f"/groups/{a.group_id}/").content.decode(),
             "compare": client.get(f"/runs/{run.id}/compare/?t={a.id}&t={c.id}").content.decode()}
    for name, page in pages.items():
        for t in (a, c):
            assert expected[t.id] in page, name
        assert "Attempt 1" not in page and "attempt 2" not in page, name
    for t in (a, b, c, d):
        assert expected[t.id] in client.get(f"/trajectories/{t.id}/").content.decode()
        assert _api(run.project.owner).get(f"/api/trajectories/{t.id}/").json()["explanation"] == expected[t.id]
    live = RunEvent.objects.get(run=run, kind="group_scored").payload["trajectories"]
    assert {t["id"]: t["explanation"] for t in live} == expected  # what the websocket sent


def _scored(run, scores: list[float], *, step: int = 1) -> list[Trajectory]:
    records = [{"scenario_id": "s1", "messages": [{"role": "user", "content": "Refund policy?"},
                                                  {"role": "assistant", "content": f"answer {i}"}],
                "reward": s, "judge_score": s, "explanation": f"judged {s}", "criteria": {}, "metadata": {},
                "advantage": 0.0} for i, s in enumerate(scores)]
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": step, "group_index": 0,
                                           "scenario_id": "s1", "trajectories": records,
                                           "reward_mean": sum(scores) / len(scores), "reward_std": 0.1})
    return list(Trajectory.objects.filter(group__run=run, group__step_index=step).order_by("index"))


def test_the_apis_reward_is_the_reward_that_trains_and_the_judges_score_is_judge_score():
    from webapp.services.review import trajectory_override

    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True)
    a, b = _scored(run, [0.437, 0.2])
    trajectory_override(user=run.project.owner, trajectory=a, score=0.0, reason="invents a policy")
    api = _api(run.project.owner)
    one = api.get(f"/api/trajectories/{a.id}/").json()
    assert (one["reward"], one["judge_score"], one["effective_reward"]) == (0.0, 0.437, 0.0)
    listed = {t["label"]: t for t in api.get(f"/api/groups/{a.group_id}/").json()["trajectories"]}
    assert (listed["A"]["reward"], listed["A"]["judge_score"]) == (0.0, 0.437)
    assert (listed["B"]["reward"], listed["B"]["judge_score"]) == (0.2, 0.2)
    schema = api.get("/api/schema/?format=json").json()["components"]["schemas"]
    fields = schema["TrajectorySummary"]["properties"]
    assert "trains" in fields["reward"]["description"] and "judge" in fields["judge_score"]["description"]


def test_ranks_and_group_means_follow_the_human_scores_on_every_page_and_the_api(client):
    import re

    from webapp.services.review import group_reorder, trajectory_override

    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True)
    a, b, c = _scored(run, [0.9, 0.3, 0.6])  # the judge ranks A, C, B
    owner = run.project.owner
    trajectory_override(user=owner, trajectory=a, score=0.0, reason="invents a refund policy")
    _login(client, owner)
    card = client.get(f"/runs/{run.id}/").content.decode().split(f'id="group-{a.group_id}"')[1]
    ranks = dict(re.findall(r'data-label="(\w)">\s*<td class="label">.*?<td class="rank">(\d)</td>', card, re.S))
    assert ranks == {"C": "1", "B": "2", "A": "3"}
    assert "mean reward 0.300" in card  # (0.0 + 0.3 + 0.6) / 3, what the step trains on
    assert "judge mean 0.600" in card  # the judge's own mean, named as such
    assert "rank 3 of 3" in client.get(f"/trajectories/{a.id}/").content.decode()
    side = client.get(f"/groups/{a.group_id}/").content.decode()
    assert "mean reward 0.300" in side and "A <span class=\"muted\">(rank 3)" in side
    body = _api(owner).get(f"/api/groups/{a.group_id}/").json()
    assert body["reward_mean"] == pytest.approx(0.3)
    assert {t["label"]: t["rank"] for t in body["trajectories"]} == {"A": 3, "B": 2, "C": 1}

    group_reorder(user=owner, group=a.group, order=[b.id, a.id, c.id], reason="B is the only faithful one")
    body = _api(owner).get(f"/api/groups/{a.group_id}/").json()
    assert {t["label"]: t["rank"] for t in body["trajectories"]} == {"B": 1, "A": 2, "C": 3}
    assert body["reward_mean"] == pytest.approx(0.3)  # a reorder moves the scores, it keeps their mean


def test_the_export_carries_the_review_reads_in_the_judging_cli_and_round_trips(client, tmp_path, judge_double,
                                                                                 capsys, monkeypatch):
    import json

    from judging.cli import GroupLine, main, read_groups
    from webapp.services.review import trajectory_override

    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True)
    a, b, c = _scored(run, [0.9, 0.3, 0.6])
    owner = run.project.owner
    trajectory_override(user=owner, trajectory=a, score=0.0, reason="invents a refund policy")
    response = _login(client, owner).get(f"/runs/{run.id}/export.jsonl")
    text = b"".join(response.streaming_content).decode()
    path = tmp_path / "groups.jsonl"
    path.write_text(text)

    exported = json.loads(text.splitlines()[0])
    stored = {t["id"]: t["review"] for t in exported["trajectories"]}
    assert stored["A"] | {"overrides": None} == {
        "rank": 3, "judge_score": 0.9, "explanation": "judged 0.9", "criteria": {}, "env_reward": None,
        "human_score": 0.0, "reward": 0.0, "trained_reward": None, "advantage": None, "overrides": None}
    (override,) = stored["A"]["overrides"]
    assert {k: override[k] for k in ("kind", "before", "after", "reason", "user", "applies_to_training")} == {
        "kind": "score", "before": None, "after": 0.0, "reason": "invents a refund policy",
        "user": owner.username, "applies_to_training": True}
    assert override["at"].startswith(str(a.overrides.get().created_at.year))
    assert (stored["C"]["rank"], stored["C"]["reward"], stored["C"]["human_score"]) == (1, 0.6, None)
    assert exported["review"] | {"judge_mean": round(exported["review"]["judge_mean"], 6)} == {
        "step": 1, "group": 1, "scenario_id": "s1", "reward_mean": pytest.approx(0.3), "reward_std": pytest.approx(
            0.2449, abs=1e-4), "judge_mean": 0.6, "skipped": False, "scoring_error": ""}

    # Round trip: what the judging CLI reads back is exactly what was exported, review included.
    (line,) = read_groups(path)
    assert line.model_dump(mode="json", exclude_unset=True) == exported
    assert GroupLine.model_validate(line.model_dump(mode="json", exclude_unset=True)) == line
    # And the CLI scores it, naming the answers by their labels, the stored reward beside the new score.
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    judge_double.queue(JudgeDouble.scores_reply({"1": 0.2, "2": 0.5, "3": 0.8}))
    code = main(["score", str(path), "--judge-model", judge_double.model, "--api-base", judge_double.api_base,
                 "--no-cache", "--no-shuffle"])
    out = capsys.readouterr().out
    assert code == 0 and "A  0.200  (stored reward 0.000, human 0.000)" in out and "C  0.800  (stored reward" in out


def test_an_override_before_the_step_trains_shows_no_stale_advantage_until_the_engine_recomputes_it(client):
    from webapp.services.review import trajectory_override

    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True)
    a, b, c = _scored(run, [0.9, 0.3, 0.6])
    Trajectory.objects.filter(pk__in=[a.pk, b.pk, c.pk]).update(advantage=0.3)  # as the engine sent them
    owner = run.project.owner
    trajectory_override(user=owner, trajectory=a, score=0.0, reason="invents a refund policy")
    assert list(Trajectory.objects.filter(group=a.group).values_list("advantage", flat=True)) == [None] * 3
    _login(client, owner)
    card = client.get(f"/runs/{run.id}/").content.decode().split(f'id="group-{a.group_id}"')[1]
    assert '<td class="advantage">0.300</td>' not in card
    assert _api(owner).get(f"/api/trajectories/{a.id}/").json()["advantage"] is None

    run_event_ingest(run_id=run.id, event={"kind": "review_applied", "step": 1, "groups": [
        {"group_index": 0, "rewards": [0.0, 0.3, 0.6], "advantages": [-0.3, 0.0, 0.3], "skipped": False}]})
    a.refresh_from_db()
    assert a.advantage == pytest.approx(-0.3)

    # Once the step is handed to training, a change is a label only: the advantages that trained stay.
    Run.objects.filter(pk=run.pk).update(reviewed_through_step=1)
    trajectory_override(user=owner, trajectory=b, score=1.0, reason="the only faithful answer")
    a.refresh_from_db()
    assert a.advantage == pytest.approx(-0.3)
