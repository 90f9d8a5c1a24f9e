"""A checkpoint of the project as the distillation teacher (issue 36): chosen in the form by id, it answers from the
project's inference server (the embedded executor's `serve` pool, the tiny model with a real LoRA adapter loaded by
its served name), the judge double ranks its answers over HTTP, and the best become drafts. The server is asked
for by id only: another project's checkpoint is refused and nothing starts."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.judge_double import JudgeDouble
from tests.webapp.factories import dataset_factory, judge_factory, member_factory, project_factory
from tests.webapp.serving_world import completed_run, lora_adapters, serving  # noqa: F401  (fixtures)
from webapp.execution.executors import wait_idle
from webapp.models import Distillation, DistillationDraft, ProjectServer, Role, Scenario, ScenarioSet
from webapp.services.secrets import secret_encrypt

pytestmark = pytest.mark.django_db(transaction=True)


def longer_is_better(text: str) -> float:
    return min(1.0, len(text) / 400)


def _world(project, model_dir, adapters, judge_double):
    run = completed_run(project=project, model_dir=model_dir, adapters=adapters, max_tokens=16, temperature=1.0,
                        system_prompt="Answer briefly.")
    scenario_set = ScenarioSet.objects.create(project=project, name="questions")
    for i, question in enumerate(["What is the refund policy?", "When do you open?"]):
        Scenario.objects.create(scenario_set=scenario_set, external_id=f"q{i}", user_message=question)
    judge = judge_factory(project=project, name="judge", model=judge_double.model, api_base=judge_double.api_base,
                          api_key_encrypted=secret_encrypt(plaintext="test"))
    return run, scenario_set, judge, dataset_factory(project=project, rows=1)


def test_a_checkpoint_of_the_project_teaches_from_the_projects_server_and_the_judge_keeps_its_best(
        serving, lora_adapters, judge_double, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("RUBRIC_STUDIO_JUDGE_CACHE", str(tmp_path / "judge-cache"))
    judge_double.responder = JudgeDouble.score_by(longer_is_better)
    project = project_factory()
    run, scenario_set, judge, dataset = _world(project, serving, lora_adapters[:2], judge_double)
    checkpoint = run.checkpoints.get(step_index=2)
    client = Client()
    client.force_login(project.owner)
    form = client.get(reverse("distillation-create", args=[project.id])).content.decode()
    assert "demo@2 (run demo)" in form  # the checkpoints are offered by name, as the teacher
    response = client.post(reverse("distillation-create", args=[project.id]), {
        "dataset": dataset.id, "agent": run.agent_id, "scenario_set": scenario_set.id,
        "teacher_checkpoint": checkpoint.id, "judge_config": judge.id, "answers_per_scenario": 3,
        "threshold": 0.0, "max_scenarios": 10})
    assert response.status_code == 302, response.content.decode()[-2000:]
    wait_idle(timeout=300)
    job = Distillation.objects.get()
    assert job.status == Distillation.Status.DONE, job.error
    assert not [d.reason for d in job.drafts.all() if d.reason]
    assert job.teacher is None and job.teacher_checkpoint == checkpoint
    assert job.config["teacher"]["model"] == "demo@2"
    # Every answer came from the checkpoint's adapter: the environment refuses an answer under another name.
    assert job.summary["teacher"]["requests"] == 6 and job.summary["teacher"]["self_hosted"]
    assert job.summary["teacher"]["completion_tokens"] > 0
    server = ProjectServer.objects.get(project=project)
    assert server.base_model == str(serving) and server.starts == 1
    drafts = list(job.drafts.order_by("index"))
    assert [d.scenario_external_id for d in drafts] == ["q0", "q1"]
    for draft in drafts:
        assert draft.status == DistillationDraft.Status.PENDING and draft.candidates == 3
        assert draft.judge_score == max(draft.rewards)  # the judge's best of the three
        answer = draft.messages[-1]
        assert answer["role"] == "assistant" and draft.messages[0]["content"] == "Answer briefly."
    page = client.get(reverse("distillation-detail", args=[job.id])).content.decode()
    assert "demo@2" in page and "the project's own server" in page
    version = client.post(reverse("distillation-accept", args=[job.id]))
    assert version.status_code == 302
    added = dataset.latest_version.rows.order_by("index").last()
    assert added.metadata["teacher"] == "demo@2" and added.metadata["distillation"] == job.id


def test_another_projects_checkpoint_cannot_teach_and_nothing_starts(tiny_model_dir, judge_double, settings):
    settings.STUDIO_EXECUTOR = "celery"  # nothing consumes it here; nothing may be asked for anyway
    mine, theirs = project_factory(), project_factory()
    run, scenario_set, judge, dataset = _world(mine, tiny_model_dir, [tiny_model_dir], judge_double)
    other = completed_run(project=theirs, model_dir=tiny_model_dir, adapters=[tiny_model_dir], name="theirs")
    # An editor who is also a member of the other project: the id resolves, the service refuses it.
    editor = member_factory(project=mine, role=Role.EDITOR)
    member_factory(project=theirs, role=Role.VIEWER, user=editor)
    client = Client()
    client.force_login(editor)
    body = {"dataset": dataset.id, "agent": run.agent_id, "scenario_set": scenario_set.id,
            "teacher_checkpoint": other.checkpoints.get().id, "judge_config": judge.id, "answers_per_scenario": 2,
            "threshold": 0.5, "max_scenarios": 5}
    page = client.post(reverse("distillation-create", args=[mine.id]), body)
    assert page.status_code == 400  # the form offers only this project's checkpoints
    api = client.post("/api/distillations/", {**body, "project": mine.id}, content_type="application/json")
    assert api.status_code == 400 and "teacher_checkpoint" in api.json(), api.content
    # Both teachers, or neither: refused with the reason.
    both = client.post("/api/distillations/", {**body, "project": mine.id, "teacher": judge.id,
                                               "teacher_checkpoint": run.checkpoints.get().id},
                       content_type="application/json")
    assert both.status_code == 400 and "one of the two" in str(both.json()["teacher"])
    assert not Distillation.objects.exists() and not ProjectServer.objects.exists()
