"""Review you can trust (issue 11): one label and one effective reward per trajectory on every page and the API,
runs frozen at launch, and the smaller contradictions a reviewer met: counts, cut text, duplicate launches,
resume without a checkpoint, failed groups called zero-variance, stored scores named after the wrong version."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.judge_double import JudgeDouble
from tests.webapp.factories import (
    PASSWORD, agent_factory, judge_factory, project_factory, rubric_factory, run_factory,
)
from tests.webapp.test_review import _api, _group
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Rescore, Run, RunStatus, TrajectoryGroup
from webapp.models.catalogue import PROMPT_MAX
from webapp.services.catalogue import agent_update, rubric_version_create
from webapp.services.review import run_review_rewards, trajectory_override
from webapp.services.runs import run_resume

pytestmark = pytest.mark.django_db


def _login(client, user):
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _cell(html: str, cls: str) -> list[str]:
    cells = re.findall(rf'class="(?:[^"]* )?{cls}"[^>]*>(.*?)</td>', html, re.S)
    return [re.sub(r"<[^>]+>", "", m).strip() for m in cells]


def _gated_override_story(*, label_only: bool = False):
    """A gated run's step 1: the judge liked answer C best (0.747); a person scores it 0.1 before approval (or,
    with label_only, after the step trained); the engine then trains on the reviewed rewards."""
    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True)
    scores = [0.5, 0.3, 0.747, 0.2]
    trajectories = _group(run, step=1, scores=scores)
    top = trajectories[2]
    if not label_only:
        trajectory_override(user=run.project.owner, trajectory=top, score=0.1, reason="invents a refund policy")
    handed = run_review_rewards(run_id=run.id, step=1)
    rewards = handed["rewards"]["0"]
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    run_event_ingest(run_id=run.id, event={"kind": "review_applied", "step": 1, "groups": [
        {"group_index": 0, "advantages": [(r - mean) / std for r in rewards]}]})
    run_event_ingest(run_id=run.id, event={"kind": "step_finished", "step": 1, "metrics": {"reward_mean": mean}})
    if label_only:
        trajectory_override(user=run.project.owner, trajectory=top, score=0.1, reason="invents a refund policy")
    run.refresh_from_db()
    top.refresh_from_db()
    return run, top, rewards


def test_the_trajectory_page_shows_the_human_score_and_the_reward_that_trained_after_a_gated_override(client):
    run, top, rewards = _gated_override_story()
    assert rewards[2] == 0.1  # the engine was handed the human score
    html = _login(client, run.project.owner).get(f"/trajectories/{top.id}/").content.decode()
    assert _cell(html, "judge") == ["0.747"] and _cell(html, "human") == ["0.100"]
    assert _cell(html, "effective") == ["0.100"] and _cell(html, "trained") == ["0.100"]
    assert _cell(html, "advantage") == [f"{top.advantage:.3f}"] and top.advantage < 0
    assert "trained on 0.100" in html


def test_an_override_after_the_step_trained_is_shown_as_a_label_beside_the_reward_that_trained(client):
    run, top, _ = _gated_override_story(label_only=True)
    html = _login(client, run.project.owner).get(f"/trajectories/{top.id}/").content.decode()
    assert _cell(html, "human") == ["0.100"] and _cell(html, "trained") == ["0.747"]
    assert "came after the step trained and is a label only" in html


def test_one_trajectory_has_one_label_on_the_group_page_its_page_the_audit_and_the_api(client):
    run, top, _ = _gated_override_story()
    assert top.index == 2 and top.rank == 4 and top.label == "C"  # ranked last by its human score; still C
    _login(client, run.project.owner)
    group_page = client.get(f"/groups/{top.group_id}/").content.decode()
    column = group_page.split(f'id="col-{top.id}"')[1].split("</section>")[0]
    assert '<span class="label">C</span>' in column and _cell(column, "trained") == ["0.100"]
    assert 'id="trajectory-label">C<' in client.get(f"/trajectories/{top.id}/").content.decode()
    audit = client.get(f"/runs/{run.id}/review/").content.decode().split('id="audit"')[1]
    assert 'answer <span class="label">C</span>' in audit and "#3" not in audit
    card = client.get(f"/runs/{run.id}/").content.decode().split(f'id="group-{top.group_id}"')[1]
    assert re.search(rf'data-label="C">\s*<td class="label"><a href="/trajectories/{top.id}/">C</a>', card)
    row = card.split('data-label="C"')[1].split("</tr>")[0]
    assert _cell(row, "trained") == ["0.100"] and _cell(row, "effective") == ["0.100"]
    api = _api(run.project.owner)
    body = api.get(f"/api/trajectories/{top.id}/").json()
    assert body["label"] == "C"
    assert body["review"] | {"note": ""} == {
        "label": "C", "judge_score": 0.747, "env_reward": None, "human_score": 0.1, "effective_reward": 0.1,
        "trained": True, "trained_reward": 0.1, "advantage": top.advantage, "note": ""}
    assert api.get(f"/api/runs/{run.id}/overrides/").json()["results"][0]["trajectory_label"] == "C"


def test_the_judges_presentation_numbers_are_translated_to_the_labels_people_see(client):
    run = run_factory(status=RunStatus.COMPLETED)
    # The judge saw the answers in the order C, A, B: its "Attempt 2" is A and its "trajectory 1" is C.
    explanations = ["Clear, but weaker than trajectory 1.", "Vague.", "Better than Attempt 2: cites the policy."]
    reply = json.dumps({"scores": [{"trajectory_id": str(p), "score": 0.5, "explanation": explanations[i]}
                                   for p, i in ((1, 2), (2, 0), (3, 1))]})
    trajectories = _group(run, step=1, scores=[0.5, 0.2, 0.9], explanations=explanations)
    first = trajectories[0]
    first.metadata = {"judge_calls": [{"order": [2, 0, 1], "raw_reply": reply, "pass_index": 0}]}
    first.save(update_fields=["metadata"])
    _login(client, run.project.owner)
    page = client.get(f"/trajectories/{trajectories[2].id}/").content.decode()
    assert "Better than Attempt A: cites the policy." in page and "Attempt 2" not in page
    group_page = client.get(f"/groups/{first.group_id}/").content.decode()
    assert "weaker than trajectory C." in group_page and "trajectory 1." not in group_page
    assert "Better than Attempt A" in client.get(f"/runs/{run.id}/").content.decode()
    body = _api(run.project.owner).get(f"/api/trajectories/{first.id}/").json()
    assert body["explanation"] == "Clear, but weaker than trajectory C."


def test_editing_an_agent_after_launch_changes_nothing_the_run_shows_or_resumes_with(client, settings):
    settings.STUDIO_HF_MODELS = ["org/*"]  # the deployment allows both models named below
    project = project_factory()
    agent = agent_factory(project=project, base_model="org/model-v1", system_prompt="Be brief.")
    run = run_factory(project=project, agent=agent, status=RunStatus.FAILED,
                      overrides={"grpo": {"beta": 0.04}})
    frozen = json.loads(json.dumps(run.config))
    agent_update(user=project.owner, agent=agent, base_model="org/model-v2", system_prompt="Be verbose.")
    agent.refresh_from_db()
    assert agent.version == 2  # a used agent is versioned, as rubrics are
    agent_update(user=project.owner, agent=agent, system_prompt="Be very verbose.")
    agent.refresh_from_db()
    assert agent.version == 2  # v2 is not used by any run yet: edited in place
    html = _login(client, project.owner).get(f"/runs/{run.id}/").content.decode()
    assert 'id="run-model">org/model-v1<' in html and "org/model-v2" not in html and "verbose." not in html
    assert "(now v2; this run keeps v1)" in html
    panel = html.split('id="run-config"')[1].split("</details>")[0]
    for setting in ("org/model-v1", "Be brief.", "0.001", "Group size", ">2<", "Seed", "0.04"):
        assert setting in panel, setting
    run_resume(user=project.owner, run=run)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.config == frozen  # what the runner hands the engine


def test_the_run_config_panel_names_the_judge_and_rubric_version_the_run_used(client):
    project = project_factory()
    judge = judge_factory(project=project, model="openai/judge-a")
    rubric = rubric_factory(project=project)
    run = run_factory(project=project, judge_config=judge, rubric_version=rubric.latest_version)
    judge.model = "openai/judge-b"
    judge.save()
    rubric_version_create(user=project.owner, rubric=rubric, text="A newer text.")
    html = _login(client, project.owner).get(f"/runs/{run.id}/").content.decode()
    panel = html.split('id="run-config"')[1].split("</details>")[0]
    assert "openai/judge-a" in panel and f"{rubric.name} v1" in panel and "judge-b" not in html
    assert 'id="run-judge">openai/judge-a<' in html


@pytest.mark.django_db(transaction=True)  # the in-process judge pool reads the rows from another thread
def test_the_playground_names_the_version_that_scored_the_stored_groups(client, judge_double, inprocess_executor,
                                                                       monkeypatch):
    from webapp.execution.executors import wait_idle

    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    project = project_factory()
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    rubric = rubric_factory(project=project, text="v1 text")
    run = run_factory(project=project, judge_config=judge, rubric_version=rubric.latest_version,
                      status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.9, 0.2])
    trajectory_override(user=project.owner, trajectory=trajectories[0], score=0.1, reason="wrong")
    trajectory_override(user=project.owner, trajectory=trajectories[1], score=0.8, reason="right")
    v2 = rubric_version_create(user=project.owner, rubric=rubric, text="v2 text")
    created = _api(project.owner).post("/api/playground/", {
        "project": project.id, "group_ids": [trajectories[0].group_id], "judge_config": judge.id,
        "base_version": v2.id, "rubric_text": "a candidate"}, format="json")
    assert created.status_code == 201, created.json()
    wait_idle(timeout=60)
    rescore = Rescore.objects.get(pk=created.json()["id"])
    assert rescore.status == "done", rescore.error
    html = _login(client, project.owner).get(f"/playground/{rescore.id}/").content.decode()
    assert f"Stored scores (<span class=\"stored-with\">{rubric.name} v1</span>)" in html
    assert "Current version" not in html and f"Stored ({rubric.name} v1)" in html


def test_the_review_page_counts_every_human_score_as_the_queue_does(client):
    run = run_factory(status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.5, 0.5, 0.49, 0.1],  # passes disagree: in the queue
                          judge_meta={"disagreement": 0.2, "passes": 2})
    trajectory_override(user=run.project.owner, trajectory=trajectories[0], score=0.9, reason="better")
    html = _login(client, run.project.owner).get(f"/runs/{run.id}/review/").content.decode()
    assert "1 / 4" in html.split('id="review-queue"')[1]
    assert re.search(r'id="human-scores">1<', html)


def test_a_pasted_rubric_is_never_cut_the_form_counts_and_refuses_text_over_the_limit(client):
    project = project_factory()
    _login(client, project.owner)
    form = client.get(f"/projects/{project.id}/rubrics/new/").content.decode()
    textarea = re.search(r"<textarea[^>]*name=\"text\"[^>]*>", form).group(0)
    assert "maxlength" not in textarea and f'data-limit="{PROMPT_MAX}"' in textarea
    assert "counter.js" in form
    long_text = "word " * 5519 + "words"  # 27,600 characters
    response = client.post(f"/projects/{project.id}/rubrics/new/", {"name": "long", "text": long_text})
    assert response.status_code == 400
    assert "the text is 27,600 characters; the limit is 20,000" in response.content.decode()
    assert not project.rubrics.exists()


def test_the_same_launch_form_submitted_twice_starts_one_run(client):
    project = project_factory()
    agent = agent_factory(project=project, environment_options={"exact_match": True})  # needs no judge
    from tests.webapp.factories import scenario_set_factory

    scenarios = scenario_set_factory(project=project)
    _login(client, project.owner)
    form = client.get(f"/projects/{project.id}/runs/new/").content.decode()
    token = re.search(r'name="launch_token" value="([0-9a-f]+)"', form).group(1)
    data = {"name": "once", "agent": agent.id, "scenario_set": scenarios.id, "steps": 1, "group_size": 2,
            "groups_per_step": 1, "learning_rate": 0.001, "seed": 0, "launch_token": token}
    first = client.post(f"/projects/{project.id}/runs/new/", data)
    again = client.post(f"/projects/{project.id}/runs/new/", data)  # the back button, then Launch
    assert first.status_code == again.status_code == 302 and first["Location"] == again["Location"]
    assert Run.objects.filter(project=project).count() == 1
    other = client.get(f"/projects/{project.id}/runs/new/").content.decode()
    assert token not in other  # a fresh form is a new launch


def test_resume_says_restart_without_a_checkpoint_and_a_failed_group_is_not_called_zero_variance(client):
    run = run_factory(status=RunStatus.FAILED)
    _group(run, step=1, scores=[0.0, 0.0], skipped=True)
    TrajectoryGroup.objects.filter(run=run).update(scoring_error="judge unreachable: connection refused")
    html = _login(client, run.project.owner).get(f"/runs/{run.id}/").content.decode()
    assert "Resume from last checkpoint" not in html and "Restart from the beginning" in html
    assert "scoring failed" in html and "zero variance" not in html
    Checkpoint.objects.create(run=run, step_index=3, path="/nonexistent", adapter_name="a")
    html = client.get(f"/runs/{run.id}/").content.decode()
    assert "Resume from the step 3 checkpoint" in html


def test_long_answers_wrap_and_the_scenario_panel_shows_the_reference_answer(client):
    from tests.webapp.factories import scenario_set_factory

    project = project_factory()
    scenarios = scenario_set_factory(project=project)
    scenarios.scenarios.filter(external_id="s1").update(reference="Refunds within 30 days.")
    run = run_factory(project=project, scenario_set=scenarios, status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.4, 0.6])
    html = _login(client, run.project.owner).get(f"/groups/{trajectories[0].group_id}/").content.decode()
    assert 'id="scenario-reference">Refunds within 30 days.<' in html
    css = (Path(__file__).resolve().parents[2] / "static" / "webapp" / "style.css").read_text()
    assert re.search(r"\.group td\.answer[^{]*\{[^}]*overflow-wrap: anywhere", css)


_ = JudgeDouble  # the judge_double fixture's type


# --- build items: test judge, version picker, rubric diff, overlay -----------------------------------------

def test_the_test_judge_button_makes_one_real_call_and_shows_latency_cost_and_the_reply(client, judge_double,
                                                                                        monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.1 if "5" in text else 0.9)
    project = project_factory()
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    _login(client, project.owner)
    assert 'id="test-judge"' in client.get(f"/judges/{judge.id}/").content.decode()
    html = client.post(f"/judges/{judge.id}/test/").content.decode()
    assert len(judge_double.requests) == 1 and "2 + 2" in judge_double.requests[0].prompt_text
    assert 'data-ok="1"' in html and re.search(r'id="judge-test-latency">\d+\.\d\d s<', html)
    assert "unknown (no price for this model)" in html  # the double's model has no price: unknown, not $0
    assert "trajectory_id" in html.split('id="judge-test-reply"')[1]  # the judge's own reply, escaped


def test_a_judge_that_is_down_fails_the_test_at_once_with_its_reason(client, monkeypatch, settings):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    api_base = f"http://127.0.0.1:{port}/v1"
    settings.STUDIO_JUDGE_KEY_ENDPOINTS = {"STUDIO_TEST_ABSENT_API_KEY": (api_base,), "STUDIO_TEST_DOWN_API_KEY": (api_base,)}
    project = project_factory()
    judge = judge_factory(project=project, model="openai/judge", api_base=api_base, api_key_env="")
    judge.api_key_env = "STUDIO_TEST_ABSENT_API_KEY"
    judge.save()
    html = _login(client, project.owner).post(f"/judges/{judge.id}/test/").content.decode()
    assert 'data-ok="0"' in html and "STUDIO_TEST_ABSENT_API_KEY&#x27;, but that environment variable is not set" in html
    monkeypatch.setenv("STUDIO_TEST_DOWN_API_KEY", "test")
    judge.api_key_env = "STUDIO_TEST_DOWN_API_KEY"
    judge.save()
    html = client.post(f"/judges/{judge.id}/test/").content.decode()
    # the transport's own failure (the pinned client's connect error), named as unreachable, never retried
    assert 'data-ok="0"' in html and "ConnectError" in html and "could not be reached" in html
    assert "after 0 retries" in html


def test_a_viewer_cannot_test_a_judge(client):
    from tests.webapp.factories import member_factory
    from webapp.models import Role

    project = project_factory()
    judge = judge_factory(project=project)
    viewer = member_factory(project=project, role=Role.VIEWER)
    assert _login(client, viewer).post(f"/judges/{judge.id}/test/").status_code in (403, 404)


def test_launch_picks_a_rubric_version_defaulting_to_the_latest_and_preselects_the_only_rubric_and_judge(
        client, judge_double):
    from tests.webapp.factories import scenario_set_factory

    project = project_factory()
    agent = agent_factory(project=project)
    scenarios = scenario_set_factory(project=project)
    judge = judge_factory(project=project, api_base=judge_double.api_base)
    judge_double.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                   {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})  # launch's test
    rubric = rubric_factory(project=project, text="first")
    v2 = rubric_version_create(user=project.owner, rubric=rubric, text="second")
    _login(client, project.owner)
    form = client.get(f"/projects/{project.id}/runs/new/").content.decode()
    assert re.search(rf'<option value="{rubric.id}" selected>', form)
    assert re.search(rf'<option value="{judge.id}" selected>', form)
    assert "the latest version" in form and f"{rubric.name} v1" in form
    data = {"agent": agent.id, "scenario_set": scenarios.id, "steps": 1, "group_size": 2, "groups_per_step": 1,
            "learning_rate": 0.001, "seed": 0, "rubric": rubric.id, "judge_config": judge.id}
    client.post(f"/projects/{project.id}/runs/new/", {**data, "name": "latest"})
    client.post(f"/projects/{project.id}/runs/new/", {**data, "name": "pinned",
                                                      "rubric_version": rubric.versions.get(number=1).id})
    latest, pinned = Run.objects.get(name="latest"), Run.objects.get(name="pinned")
    assert latest.rubric_version == v2 and latest.config["judge"]["rubric"] == "second"
    assert pinned.rubric_version.number == 1 and pinned.config["judge"]["rubric"] == "first"


def test_a_rubric_page_diffs_two_versions_word_by_word_and_lists_the_runs_of_each(client):
    project = project_factory()
    judge = judge_factory(project=project)
    rubric = rubric_factory(project=project, text="Prefer short answers that cite the policy.")
    run = run_factory(project=project, judge_config=judge, rubric_version=rubric.latest_version, name="on-v1")
    rubric_version_create(user=project.owner, rubric=rubric, text="Prefer complete answers that cite the <policy>.")
    html = _login(client, project.owner).get(f"/rubrics/{rubric.id}/").content.decode()
    diff = html.split('id="rubric-diff-text">')[1].split("</pre>")[0]
    assert "<del>short</del><ins>complete</ins>" in diff.replace("\n", "")
    assert "&lt;" in diff and "<policy>" not in diff  # rubric text is escaped
    assert f'<a href="/runs/{run.id}/">on-v1</a>' in html.split('id="version-runs-1"')[1].split("</p>")[0]
    assert "No run has used this version yet." in html.split('id="version-runs-2"')[1].split("</p>")[0]


def test_the_overlay_shows_each_picked_runs_curves_and_only_series_a_run_can_have(client):
    project = project_factory()
    judged = run_factory(project=project, judge_config=judge_factory(project=project), name="judged",
                         status=RunStatus.COMPLETED)
    plain = run_factory(project=project, name="plain", status=RunStatus.COMPLETED)
    for run, values in ((judged, [0.2, 0.5]), (plain, [0.1, 0.3])):
        for step, v in enumerate(values, start=1):
            run_event_ingest(run_id=run.id, event={"kind": "step_finished", "step": step,
                                                   "metrics": {"reward_mean": v, "judge_mean": v}})
    _login(client, project.owner)
    empty = client.get(f"/projects/{project.id}/runs/compare/").content.decode()
    assert "overlay-data" not in empty and 'id="overlay"' in empty
    html = client.get(f"/projects/{project.id}/runs/compare/?run={judged.id}&run={plain.id}").content.decode()
    data = json.loads(re.search(r'id="overlay-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert [s["name"] for s in data] == ["judged", "plain"]
    assert [p["value"] for p in data[0]["reward"]] == [0.2, 0.5] and [p["step"] for p in data[1]["reward"]] == [1, 2]
    assert data[0]["judge"] and data[1]["judge"] == []  # no judge curve for a run without a judge
    other = run_factory(project=project_factory(), name="elsewhere")
    foreign = client.get(f"/projects/{project.id}/runs/compare/?run={other.id}").content.decode()
    assert "elsewhere" not in foreign


def test_the_review_queue_ranks_groups_by_the_value_of_a_look_and_says_why(client):
    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True)
    # Step 1 trained already; step 2 waits for review. Same signal (judge passes disagree) in both: the open step
    # ranks first.
    spread = {"disagreement": 0.15, "passes": 2}
    _group(run, step=1, index=0, scores=[0.50, 0.2, 0.1], judge_meta=spread)
    run_review_rewards(run_id=run.id, step=1)
    _group(run, step=2, index=0, scores=[0.50, 0.2, 0.1], judge_meta=spread)
    contradicted = _group(run, step=2, index=1, scores=[0.9, 0.5, 0.1],
                          explanations=["", "", "Correct: cites the refund window."])
    _group(run, step=2, index=2, scores=[0.9, 0.5, 0.1])  # nothing suspicious: not in the queue
    _group(run, step=2, index=3, scores=[0.50, 0.49, 0.1])  # a near-tie alone orders, it does not flag
    queue = _api(run.project.owner).get(f"/api/runs/{run.id}/review-queue/").json()["results"]
    order = [(q["step"], q["group_index"]) for q in queue]
    assert order == [(2, 1), (2, 0), (1, 0)]
    values = [q["value"] for q in queue]
    assert values == sorted(values, reverse=True) and values[1] == pytest.approx(2 * values[2])
    assert queue[0]["reasons"][0].startswith("answer C: explanation sounds positive")
    html = _login(client, run.project.owner).get(f"/runs/{run.id}/review/").content.decode()
    rows = html.split('id="review-queue"')[1].split("</table>")[0]
    assert rows.index(f"/groups/{contradicted[0].group_id}/") < rows.index("judge passes disagree")
    assert "can change training" in rows
    assert "3 of 5 groups flagged" in html


def test_scored_groups_export_as_jsonl_that_the_judging_cli_reads(client, tmp_path):
    from judging.cli import read_groups

    run = run_factory(status=RunStatus.COMPLETED)
    _group(run, step=1, index=0, scores=[0.2, 0.9])
    _group(run, step=2, index=0, scores=[0.4, 0.6])
    response = _login(client, run.project.owner).get(f"/runs/{run.id}/export.jsonl")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    path = tmp_path / "groups.jsonl"
    path.write_bytes(b"".join(response.streaming_content))
    groups = read_groups(path)
    assert [g.id for g in groups] == [f"{run.name}/step1/group1/s1", f"{run.name}/step2/group1/s1"]
    assert groups[0].names() == ["A", "B"] and groups[0].message_lists()[1][-1]["content"] == "answer 1"
    one = client.get(f"/runs/{run.id}/export.jsonl?step=2")
    assert len(b"".join(one.streaming_content).splitlines()) == 1
    stranger = project_factory().owner
    client.logout()
    assert _login(client, stranger).get(f"/runs/{run.id}/export.jsonl").status_code == 404


def test_a_runs_groups_can_be_searched_by_text_step_label_and_reward(client):
    run = run_factory(status=RunStatus.COMPLETED)
    a = _group(run, step=1, index=0, scores=[0.2, 0.9], answers=["refund in 30 days", "store credit only"])
    b = _group(run, step=2, index=0, scores=[0.4, 0.6], answers=["call the hotline", "see the website"])
    trajectory_override(user=run.project.owner, trajectory=b[0], score=0.95, reason="right")
    _login(client, run.project.owner)

    def shown(query: str) -> set[int]:
        html = client.get(f"/runs/{run.id}/?{query}").content.decode()
        return {int(g) for g in re.findall(r'<article class="group[^"]*" id="group-(\d+)"', html)}

    assert shown("") == {a[0].group_id, b[0].group_id}
    assert shown("q=HOTLINE") == {b[0].group_id}
    assert shown("step=1") == {a[0].group_id}
    assert shown("labelled=yes") == {b[0].group_id}
    assert shown("min_score=0.9") == {a[0].group_id, b[0].group_id}  # 0.9 judge; 0.95 human
    assert shown("min_score=0.92") == {b[0].group_id}  # the effective reward, not the judge's
    assert shown("q=nothing-like-this") == set()
    assert "No group matches these filters." in client.get(f"/runs/{run.id}/?q=zzz").content.decode()
    assert shown("min_score=7") == {a[0].group_id, b[0].group_id}  # bad input: an error, no filter
    page = client.get(f"/runs/{run.id}/?min_score=7").content.decode()
    assert "Ensure this value is less than or equal to 1.0" in page


def test_the_playground_filters_stored_groups_and_selects_all_shown(client):
    project = project_factory()
    first = run_factory(project=project, name="first", status=RunStatus.COMPLETED)
    second = run_factory(project=project, name="second", status=RunStatus.COMPLETED)
    agreeing = _group(first, step=1, index=0, scores=[0.9, 0.2])
    disagreeing = _group(first, step=2, index=0, scores=[0.9, 0.2])
    plain = _group(second, step=1, index=0, scores=[0.5, 0.4])
    for t, human in ((agreeing[0], 1.0), (agreeing[1], 0.0), (disagreeing[0], 0.1), (disagreeing[1], 0.8)):
        trajectory_override(user=project.owner, trajectory=t, score=human, reason="label")
    _login(client, project.owner)

    def listed(query: str) -> tuple[set[int], set[int]]:
        html = client.get(f"/projects/{project.id}/playground/?{query}").content.decode()
        boxes = re.findall(r'<input type="checkbox" name="groups" value="(\d+)"([^>]*)>', html)
        return {int(v) for v, _ in boxes}, {int(v) for v, rest in boxes if "checked" in rest}

    everything = {agreeing[0].group_id, disagreeing[0].group_id, plain[0].group_id}
    assert listed("")[0] == everything and listed("")[1] == set()
    assert listed(f"run={second.id}")[0] == {plain[0].group_id}
    assert listed("step=2")[0] == {disagreeing[0].group_id}
    assert listed("labelled=no")[0] == {plain[0].group_id}
    assert listed("disagreement=on")[0] == {disagreeing[0].group_id}
    assert listed(f"run={first.id}&all=1") == ({agreeing[0].group_id, disagreeing[0].group_id},) * 2


def test_the_footer_links_browsable_api_docs_served_without_a_cdn(client):
    from django.contrib.staticfiles import finders

    project = project_factory()
    page = _login(client, project.owner).get(f"/projects/{project.id}/").content.decode()
    assert 'href="/api/docs/" id="api-docs-link"' in page and 'href="/api/schema/"' in page
    docs = client.get("/api/docs/").content.decode()
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', docs) + re.findall(r'<link[^>]+href="([^"]+)"', docs)
    scripts = [src for src in scripts if not src.startswith("/api/docs/?script")]  # its own start-up script
    assert scripts and all(src.startswith("/static/") for src in scripts), scripts
    for src in scripts:
        assert finders.find(src.removeprefix("/static/")), src  # each asset is on this machine
    assert "/api/schema/" in client.get("/api/docs/?script=").content.decode()  # its start-up script loads it


def test_an_editor_invites_a_new_member_by_link_and_errors_appear_beside_the_members_form(client):
    from django.contrib.auth import get_user_model

    project = project_factory()
    _login(client, project.owner)
    missing = client.post(f"/projects/{project.id}/members/", {"username": "dana", "role": "reviewer"})
    assert missing.status_code == 400
    errors = missing.content.decode().split('id="member-errors"')[1].split("</ul>")[0]
    assert "no user named &#x27;dana&#x27;" in errors and not get_user_model().objects.filter(username="dana").exists()
    created = client.post(f"/projects/{project.id}/members/", {"username": "dana", "role": "reviewer",
                                                                "create": "on", "email": "dana@example.org"},
                          follow=True).content.decode()
    link = re.search(r"http://testserver(/invite/[^/]+/[^/]+/)", created).group(1)
    dana = get_user_model().objects.get(username="dana")
    assert not dana.has_usable_password() and project.memberships.get(user=dana).role == "reviewer"
    client.logout()
    form_page = client.get(link, follow=True)
    assert b'id="set-password"' in form_page.content
    done = client.post(form_page.redirect_chain[-1][0], {"new_password1": "a-long-new-passphrase-42",
                                                         "new_password2": "a-long-new-passphrase-42"})
    assert done.status_code == 302 and done["Location"] == "/login/"
    assert client.login(username="dana", password="a-long-new-passphrase-42")
    client.logout()
    assert b'id="invite-invalid"' in client.get(link, follow=True).content  # spent once used
    viewer = project.memberships.get(user=dana).user
    _login(client, project.owner)
    again = client.post(f"/projects/{project.id}/members/", {"username": viewer.username, "role": "viewer",
                                                              "create": "on"})
    assert again.status_code == 400 and "already has an account" in again.content.decode()


def test_a_scenario_is_edited_and_deleted_while_unused_and_versioned_once_a_run_used_it(client):
    from tests.webapp.factories import scenario_set_factory

    project = project_factory()
    scenarios = scenario_set_factory(project=project, scenarios=3)
    s1, s2, s3 = scenarios.scenarios.order_by("external_id")
    _login(client, project.owner)
    edit = {"external_id": "s1", "user_message": "What is the refund window?", "reference": "30 days",
            "split": "train"}
    assert client.post(f"/scenarios/{s1.id}/", edit).status_code == 302
    s1.refresh_from_db()
    assert s1.user_message == "What is the refund window?" and s1.reference == "30 days" and s1.version == 1
    assert client.post(f"/scenarios/{s3.id}/", {"action": "delete"}).status_code == 302
    assert not scenarios.scenarios.filter(pk=s3.pk).exists()

    run = run_factory(project=project, scenario_set=scenarios, name="uses-it")
    page = client.get(f"/scenarios/{s1.id}/").content.decode()
    assert 'id="scenario-used"' in page and "uses-it" in page
    client.post(f"/scenarios/{s1.id}/", {**edit, "user_message": "What is the refund window for gifts?"})
    s1.refresh_from_db()
    assert s1.retired and s1.user_message == "What is the refund window?"  # never rewritten
    current = scenarios.scenarios.get(external_id="s1", retired=False)
    assert current.version == 2 and current.user_message == "What is the refund window for gifts?"
    assert 'id="scenario-retired"' in client.get(f"/scenarios/{s1.id}/").content.decode()
    client.post(f"/scenarios/{s2.id}/", {"action": "delete"})  # used: retired, kept
    s2.refresh_from_db()
    assert s2.retired
    later = run_factory(project=project, scenario_set=scenarios, name="later")
    assert [(x["id"], x["user_message"]) for x in later.config["scenarios"]] == [
        ("s1", "What is the refund window for gifts?")]
    assert [x["user_message"] for x in run.config["scenarios"] if x["id"] == "s1"] == ["What is the refund window?"]
    listing = client.get(f"/scenario-sets/{scenarios.id}/").content.decode()
    assert f'href="/scenarios/{current.id}/"' in listing and f'href="/scenarios/{s1.id}/"' not in listing
    # The group page shows the scenario as the run was launched with it, reference answer included.
    trajectories = _group(run, step=1, scores=[0.3, 0.7])
    html = client.get(f"/groups/{trajectories[0].group_id}/").content.decode()
    assert "What is the refund window?<" in html and 'id="scenario-reference">30 days<' in html


def test_the_api_launch_takes_an_idempotency_key(client):
    from tests.webapp.factories import scenario_set_factory

    project = project_factory()
    agent = agent_factory(project=project, environment_options={"exact_match": True})  # needs no judge
    body = {"project": project.id, "name": "api-once", "agent": agent.id,
            "scenario_set": scenario_set_factory(project=project).id, "steps": 1, "launch_token": "k-123"}
    api = _api(project.owner)
    first, again = api.post("/api/runs/", body, format="json"), api.post("/api/runs/", body, format="json")
    assert first.status_code == again.status_code == 201 and first.json()["id"] == again.json()["id"]
    assert Run.objects.filter(project=project).count() == 1 and first.json()["agent_version"] == 1


@pytest.mark.django_db(transaction=True)
def test_the_playground_shows_the_candidates_explanations_with_the_stable_labels(client, judge_double,
                                                                                  inprocess_executor, monkeypatch):
    from webapp.execution.executors import wait_idle

    def respond(request) -> dict:
        """Scores by the answer, and each explanation names the best answer by the judge's own number."""
        blocks = request.trajectory_blocks()
        best = max(blocks, key=lambda tid: "faithful" in blocks[tid])
        return {"scores": [{"trajectory_id": tid, "score": 0.9 if tid == best else 0.2,
                            "explanation": "best" if tid == best else f"worse than trajectory {best}"}
                           for tid in blocks]}

    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    judge_double.responder = respond
    project = project_factory()
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    run = run_factory(project=project, status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.5, 0.4, 0.3], answers=["vague", "short", "faithful answer"])
    created = _api(project.owner).post("/api/playground/", {
        "project": project.id, "group_ids": [trajectories[0].group_id], "judge_config": judge.id,
        "rubric_text": "Prefer faithful answers."}, format="json")
    wait_idle(timeout=60)
    rescore = Rescore.objects.get(pk=created.json()["id"])
    assert rescore.status == "done", rescore.error
    shown = {row["index"]: row["explanation"] for row in rescore.results[0]["trajectories"]}
    assert shown[0] == shown[1] == "worse than trajectory C" and shown[2] == "best"
    html = _login(client, project.owner).get(f"/playground/{rescore.id}/").content.decode()
    assert "worse than trajectory C" in html


def test_a_failed_run_says_why_in_one_line_and_keeps_the_traceback_folded(client):
    error = ("the engine exited with code 1 without finishing the run; last output:\nTraceback (most recent call "
             "last):\n  File \"loop.py\", line 3\nRuntimeError: <boom>")
    run = run_factory(status=RunStatus.FAILED, error=error)
    html = _login(client, run.project.owner).get(f"/runs/{run.id}/").content.decode()
    assert re.search(r'id="run-error">the engine exited with code 1 without finishing the run; last output:<', html)
    details = html.split('id="run-error-details"')[1].split("</details>")[0]
    assert "Traceback" in details and "&lt;boom&gt;" in details
    assert "Traceback" not in html.split('id="run-error-details"')[0]


def test_the_agreement_chart_waits_for_a_group_with_two_human_scores(client):
    run = run_factory(status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.9, 0.5, 0.1])
    trajectory_override(user=run.project.owner, trajectory=trajectories[0], score=0.2, reason="wrong")
    html = _login(client, run.project.owner).get(f"/runs/{run.id}/review/").content.decode()
    assert 'id="agreement-chart-empty"' in html and 'id="agreement-chart"' not in html
    trajectory_override(user=run.project.owner, trajectory=trajectories[1], score=0.9, reason="right")
    html = client.get(f"/runs/{run.id}/review/").content.decode()
    assert 'id="agreement-chart"' in html and 'data-steps="1"' in html


def test_the_review_queue_pages_through_every_flagged_group_and_counts_them_by_reason(client):
    run = run_factory(status=RunStatus.RUNNING)
    spread = {"disagreement": 0.2, "passes": 2}
    for step in range(1, 31):  # 60 flagged groups, more than a page (50), and 30 near-ties that flag nothing
        _group(run, step=step, index=0, scores=[0.9, 0.3, 0.1], judge_meta=spread)
        _group(run, step=step, index=1, scores=[0.9, 0.5, 0.1], explanations=["", "", "Correct and complete."])
        _group(run, step=step, index=2, scores=[0.6, 0.59, 0.1])
    api = _api(run.project.owner)
    first = api.get(f"/api/runs/{run.id}/review-queue/?limit=50").json()
    assert first["count"] == 60 and len(first["results"]) == 50 and first["next"]
    rest = api.get(first["next"]).json()
    assert len(rest["results"]) == 10
    seen = {(q["step"], q["group_index"]) for q in first["results"] + rest["results"]}
    assert len(seen) == 60 and not any(index == 2 for _, index in seen)

    _login(client, run.project.owner)
    html = client.get(f"/runs/{run.id}/review/").content.decode()
    summary = html.split('id="queue-summary"')[1].split("</p>")[0]
    assert "60 of 90 groups flagged" in summary
    assert "explanation contradicts the score 30" in summary and "judge passes disagree 30" in summary
    assert "Showing 1–50" in summary and 'id="queue-next"' in html
    second = client.get(f"/runs/{run.id}/review/?queue_page=2").content.decode()
    rows = second.split('id="review-queue"')[1].split("</table>")[0]
    assert rows.count("<tr>") == 10 + 1  # the header row and the last ten
