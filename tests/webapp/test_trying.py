"""Try it (issue 37) through its pages and the embedded executor, on the tiny model and real adapters: the base and
two checkpoints answer side by side (each as its own model: the environment refuses an answer from another), the
page re-renders from the rows, the answers are judged as one group by the judge double over HTTP + litellm, and
one is saved as a scenario. Choices are the project's own rows: another project's checkpoint is refused."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.webapp.conftest import wait_for
from tests.webapp.factories import (
    judge_factory, member_factory, project_factory, rubric_factory, scenario_set_factory,
)
from tests.webapp.serving_world import completed_run, lora_adapters, serving  # noqa: F401  (fixtures)
from webapp.models import ProjectServer, Role, Scenario, TrySession

pytestmark = pytest.mark.django_db(transaction=True)


def _ask(client, run, checkpoints, **fields):
    data = {"agent": run.agent_id, "include_base": "on", "checkpoints": [c.pk for c in checkpoints],
            "system_prompt": "Answer briefly.", "message": "What is the refund policy?", **fields}
    response = client.post(reverse("try-page", args=[run.project_id]), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    return TrySession.objects.get(pk=int(response["Location"].rstrip("/").rsplit("/", 1)[1]))


def test_the_base_and_two_checkpoints_answer_side_by_side_are_judged_and_one_is_saved_as_a_scenario(
        serving, lora_adapters, client, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("RUBRIC_STUDIO_JUDGE_CACHE", str(tmp_path / "judge-cache"))
    project = project_factory()
    run = completed_run(project=project, model_dir=serving, adapters=lora_adapters[:2], max_tokens=24)
    client.force_login(project.owner)
    session = _ask(client, run, list(run.checkpoints.order_by("step_index")))
    assert [c["label"] for c in session.columns] == ["base", "demo@1", "demo@2"]
    live = client.get(reverse("try-session", args=[session.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 500ms"' in live  # the page polls while the session is live
    done = wait_for(lambda: TrySession.objects.filter(pk=session.pk, status__in=["done", "failed"]).first(),
                    timeout=180, message="the answers")
    assert done.status == "done", (done.error, done.answers)
    assert [a["status"] for a in done.answers] == ["done", "done", "done"], done.answers
    for answer in done.answers:  # each column is a conversation the agent's environment rolled out
        roles = [m["role"] for m in answer["messages"]]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        assert answer["messages"][1]["content"] == "What is the refund policy?"
    server = ProjectServer.objects.get(project=project)
    assert done.server_id == server.pk and done.server_started and done.server_wait_s is not None
    assert done.first_answer_s is not None and done.first_answer_s > 0
    page = client.get(reverse("try-session", args=[session.pk])).content.decode()
    assert "hx-trigger" not in page and "the inference server started for this session in" in page
    for answer in done.answers:  # what the page shows is what is stored, escaped
        final = answer["messages"][-1]["content"]
        if final.strip():
            from django.utils.html import escape
            assert escape(final) in page

    rubric = rubric_factory(project=project, text="Prefer short answers.")
    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as judge:
        judge_config = judge_factory(project=project, model=judge.model, api_base=judge.api_base)
        response = client.post(reverse("try-judge", args=[session.pk]),
                               {"rubric_version": rubric.latest_version.pk, "judge_config": judge_config.pk})
        assert response.status_code == 302, response.content.decode()[:2000]
        judged = wait_for(lambda: TrySession.objects.filter(pk=session.pk, judge_status__in=["done", "failed"])
                          .first(), timeout=60, message="the judge")
        assert judged.judge_status == "done", judged.judge_error
        assert len(judge.requests) == 1  # one group, one request
        blocks = judge.requests[0].trajectory_blocks()
        assert len(blocks) == len({tuple(map(str, a["messages"])) for a in done.answers})
        assert "Prefer short answers." in judge.requests[0].prompt_text
    scores = [r["score"] for r in judged.judge_results]
    assert all(s is not None for s in scores)
    assert sorted(r["rank"] for r in judged.judge_results)[0] == 1
    page = client.get(reverse("try-session", args=[session.pk])).content.decode()
    assert page.count('class="try-score"') == 3

    scenario_set = scenario_set_factory(project=project, scenarios=0)
    response = client.post(reverse("try-save", args=[session.pk]), {"column": 2, "scenario_set": scenario_set.pk,
                                                                    "external_id": "refunds-from-try"})
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = Scenario.objects.get(scenario_set=scenario_set, external_id="refunds-from-try")
    assert saved.user_message == "What is the refund policy?"
    assert saved.reference == next(m["content"] for m in reversed(done.answers[2]["messages"])
                                   if m["role"] == "assistant" and m["content"])
    assert saved.metadata["answered_by"] == "demo@2"


def test_another_projects_checkpoint_is_refused_and_nothing_starts(client, tiny_model_dir, settings):
    settings.STUDIO_EXECUTOR = "celery"  # nothing would consume it; nothing must be asked for anyway
    mine, theirs = project_factory(), project_factory()
    from tests.webapp.serving_world import completed_run

    run = completed_run(project=mine, model_dir=tiny_model_dir, adapters=[tiny_model_dir])
    other = completed_run(project=theirs, model_dir=tiny_model_dir, adapters=[tiny_model_dir], name="theirs")
    client.force_login(mine.owner)
    response = client.post(reverse("try-page", args=[mine.pk]), {
        "agent": run.agent_id, "include_base": "on", "checkpoints": [other.checkpoints.get().pk],
        "message": "hello"})
    assert response.status_code == 400
    assert not TrySession.objects.exists() and not ProjectServer.objects.exists()


def test_a_viewer_may_read_but_not_ask(client, tiny_model_dir, settings):
    settings.STUDIO_EXECUTOR = "celery"
    project = project_factory()
    run = completed_run(project=project, model_dir=tiny_model_dir, adapters=[tiny_model_dir])
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(viewer)
    assert client.get(reverse("try-page", args=[project.pk])).status_code == 200
    response = client.post(reverse("try-page", args=[project.pk]), {
        "agent": run.agent_id, "include_base": "on", "message": "hello"})
    assert response.status_code == 403
    stranger = project_factory().owner
    client.force_login(stranger)
    assert client.get(reverse("try-page", args=[project.pk])).status_code == 404
    assert not TrySession.objects.exists() and not ProjectServer.objects.exists()
