"""Try it (issue 37) through its pages and the embedded executor, on the tiny model and real adapters: the base and
two checkpoints answer side by side (each as its own model: the environment refuses an answer from another), the
page re-renders from the rows, the answers are judged as one group by the judge double over HTTP + litellm, and
one is saved as a scenario. Choices are the project's own rows: another project's checkpoint is refused."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.webapp.conftest import wait_for
from tests.webapp.factories import (
    agent_factory, judge_factory, member_factory, project_factory, rubric_factory, scenario_set_factory,
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
    chosen = agent_factory(project=project, name="terse", base_model=str(serving), max_tokens=24,
                           system_prompt="Answer in one word.")
    client.force_login(project.owner)
    # The agent picked after the box was filled with the first agent's prompt, sent before the box changed:
    # the session is the chosen agent's, with its prompt (issue 48), not the first agent's left in the box.
    session = _ask(client, run, list(run.checkpoints.order_by("step_index")), agent=chosen.pk,
                   prompt_agent=run.agent_id, system_prompt=run.agent.system_prompt)
    assert session.agent == chosen and session.system_prompt == "Answer in one word."
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
        assert answer["messages"][0]["content"] == "Answer in one word."  # the chosen agent's prompt was sent
        assert answer["messages"][1]["content"] == "What is the refund policy?"
    server = ProjectServer.objects.get(project=project)
    assert done.server_id == server.pk and done.server_started and done.server_wait_s is not None
    assert done.first_answer_s is not None and done.first_answer_s > 0
    page = client.get(reverse("try-session", args=[session.pk])).content.decode()
    assert "hx-trigger" not in page and "the inference server started for this session in" in page
    assert re.findall(r'class="muted try-source">([^<]*)<', page) == [  # base vs which checkpoint, in words
        "base model, no checkpoint", "checkpoint of run demo, step 1", "checkpoint of run demo, step 2"]
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


def _box(page: str) -> str:
    from html import unescape

    return unescape(re.search(r'id="id_system_prompt">\n?(.*?)</textarea>', page, re.S).group(1))


def test_choosing_another_agent_puts_its_system_prompt_in_the_box_and_says_whose_it_is(client, settings):
    settings.STUDIO_EXECUTOR = "celery"  # nothing is asked: nothing would consume it
    project = project_factory()
    first = agent_factory(project=project, name="Alpha", system_prompt="Answer as support staff.")
    second = agent_factory(project=project, name="Beta", system_prompt="Answer as a <pirate>.")
    client.force_login(project.owner)
    url = reverse("try-page", args=[project.pk])
    page = client.get(url).content.decode()
    assert _box(page) == "Answer as support staff." and "holds agent <strong>Alpha</strong>" in page
    # the picker asks this page for the chosen agent's prompt, and keeps the box, the line and whose it is
    picker = re.search(r'<select name="agent"[^>]*>', page).group(0)
    assert f'hx-get="{url}"' in picker and 'hx-select="#id_system_prompt"' in picker
    assert 'hx-select-oob="#prompt-source,#id_prompt_agent"' in picker
    swapped = client.get(url, {"agent": second.pk}, HTTP_HX_REQUEST="true").content.decode()
    assert _box(swapped) == "Answer as a <pirate>."
    assert re.search(r'id="prompt-source"[^>]*>[^<]*agent <strong>Beta</strong>', swapped)
    assert re.search(rf'<input type="hidden" name="prompt_agent" value="{second.pk}" id="id_prompt_agent">', swapped)
    assert first.pk != second.pk and not TrySession.objects.exists()
