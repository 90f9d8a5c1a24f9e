"""SFT data checked against the model at upload (issue 48, item 4): each conversation's tokens against the chosen
model's context (the line named, the limit and what to do), a conversation of megabytes refused by its line, the
model preselected from the project's agent, and the preview's range right on every page."""
from __future__ import annotations

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.webapp.factories import (
    TEST_TINY_MODEL, agent_factory, conversation_rows, dataset_factory, project_factory,
)
from webapp.models.datasets import DatasetVersion

pytestmark = pytest.mark.django_db


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _chat(answer: str) -> dict:
    return {"messages": [{"role": "user", "content": "Tell me about fjords."}, {"role": "assistant", "content": answer}]}


def _upload(client, dataset, data: bytes, **fields):
    return client.post(reverse("dataset-detail", args=[dataset.id]),
                       {"file": SimpleUploadedFile("chats.jsonl", data), "mode": "append", **fields})


def test_a_conversation_longer_than_the_models_context_is_refused_by_its_line_with_the_limit_and_what_to_do(
        client, tiny_model_dir):
    dataset = dataset_factory(project=project_factory(), rows=0)
    client.force_login(dataset.project.owner)
    long_answer = " ".join(f"fjord{i} is a long narrow inlet" for i in range(400))  # thousands of tokens
    response = _upload(client, dataset, _jsonl([_chat("A long narrow inlet."), _chat(long_answer)]),
                       model=TEST_TINY_MODEL)
    assert response.status_code == 400
    page = response.content.decode()
    found = re.search(r"line 2: the conversation is ([\d,]+) tokens, more than the 1,024-token context of "
                      rf"{TEST_TINY_MODEL}; shorten it or split it into shorter conversations", page)
    assert found and int(found.group(1).replace(",", "")) > 1024
    assert "line 1:" not in page and not DatasetVersion.objects.filter(dataset=dataset).exists()


def test_conversations_that_fit_are_stored_with_a_note_of_the_context_they_were_checked_against(client,
                                                                                               tiny_model_dir):
    dataset = dataset_factory(project=project_factory(), rows=0)
    client.force_login(dataset.project.owner)
    response = _upload(client, dataset, _jsonl(conversation_rows(3)), model=TEST_TINY_MODEL)
    assert response.status_code == 302
    version = DatasetVersion.objects.get(dataset=dataset)
    assert version.row_count == 3 and f"each within the 1,024-token context of {TEST_TINY_MODEL}" in version.note


def test_a_conversation_of_a_megabyte_and_a_half_is_refused_naming_its_line_and_size(client):
    dataset = dataset_factory(project=project_factory(), rows=0)
    client.force_login(dataset.project.owner)
    huge = _chat("x" * 1_500_000)
    response = _upload(client, dataset, _jsonl([_chat("A long narrow inlet."), huge]))
    assert response.status_code == 400
    page = response.content.decode()
    assert ("line 2: the conversation is 1.5 MB, more than the 1.0 MB one conversation may be; no model&#x27;s "
            "context holds that much text: split it into shorter conversations") in page
    assert "micro_batch_tokens" not in page and not DatasetVersion.objects.filter(dataset=dataset).exists()


def test_the_upload_form_checks_against_the_model_the_projects_agent_trains(client):
    project = project_factory()
    agent_factory(project=project, base_model=TEST_TINY_MODEL)
    dataset = dataset_factory(project=project, rows=1)
    client.force_login(project.owner)
    page = client.get(reverse("dataset-detail", args=[dataset.id])).content.decode()
    select = re.search(r'<select name="model"[^>]*>(.*?)</select>', page, re.S).group(1)
    assert re.search(rf'<option value="{TEST_TINY_MODEL}" selected>', select)


@pytest.mark.parametrize("page, heading", [
    (1, "v1: conversations 1–20 of 25"), (2, "v1: conversations 21–25 of 25"),
    (3, "v1: no conversation on page 3 (it holds 25)")])
def test_the_preview_says_which_conversations_each_page_shows(client, page, heading):
    dataset = dataset_factory(project=project_factory(), rows=25)
    client.force_login(dataset.project.owner)
    html = client.get(reverse("dataset-detail", args=[dataset.id]) + f"?version=1&page={page}").content.decode()
    assert re.search(r'<h2 id="preview-range">(.*?)</h2>', html).group(1) == heading


def _teach_form(project, agent, dataset, **fields) -> dict:
    return {"kind": "sft", "name": "teach-1", "agent": agent.id, "dataset": dataset.id, "epochs": 1,
            "batch_tokens": 512, "micro_batch_tokens": 256, "sft_learning_rate": 0.001, "warmup_ratio": 0.1,
            "schedule": "linear", "held_out_fraction": 0.2, "steps": 10, "group_size": 4, "groups_per_step": 2,
            "learning_rate": 1e-5, "seed": 0, **fields}


def test_an_sft_run_launches_without_a_scenario_set_and_a_grpo_run_still_asks_for_one(client):
    from webapp.models import Run

    project = project_factory()
    agent = agent_factory(project=project, environment_kind="chat")
    dataset = dataset_factory(project=project, rows=5)
    client.force_login(project.owner)
    url = reverse("run-launch", args=[project.id])
    response = client.post(url, _teach_form(project, agent, dataset))
    assert response.status_code == 302, response.content.decode()[-1500:]
    run = Run.objects.get(name="teach-1")
    assert run.scenario_set is None and run.config["kind"] == "sft" and run.config["scenarios"] == []
    page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    assert 'id="run-no-scenarios"' in page
    refused = client.post(url, {**_teach_form(project, agent, dataset), "kind": "grpo", "name": "rl-1"})
    assert refused.status_code == 400 and "choose the scenario set the run rolls out" in refused.content.decode()


def test_a_chat_agents_sft_run_with_held_out_scenarios_needs_no_judge_and_skips_the_win_rate(client):
    from tests.webapp.factories import scenario_set_factory
    from webapp.models import Run, Scenario

    project = project_factory()
    agent = agent_factory(project=project, environment_kind="chat")  # its answers have no reward of their own
    scenario_set = scenario_set_factory(project=project, scenarios=2)
    Scenario.objects.create(scenario_set=scenario_set, external_id="v1", user_message="Held out?",
                            split=Scenario.Split.VALIDATION)
    client.force_login(project.owner)
    response = client.post(reverse("run-launch", args=[project.id]), _teach_form(
        project, agent, dataset_factory(project=project, rows=5), scenario_set=scenario_set.id))
    assert response.status_code == 302, response.content.decode()[-1500:]
    config = Run.objects.get(name="teach-1").config
    assert config["judge"] is None and config["scenarios"] == [] and not config["evaluation"]["held_out_ids"]
    assert config["sft"]["held_out_fraction"] == 0.2  # the dataset's own split still gives the held-out loss


def test_the_api_upload_checks_against_the_model_it_names(tiny_model_dir):
    from rest_framework.test import APIClient

    dataset = dataset_factory(project=project_factory(), rows=0)
    api = APIClient()
    api.force_authenticate(dataset.project.owner)
    long_answer = " ".join(f"fjord{i} is a long narrow inlet" for i in range(400))
    response = api.post(f"/api/datasets/{dataset.id}/upload/", {
        "file": SimpleUploadedFile("a.jsonl", _jsonl([_chat(long_answer)])), "model": TEST_TINY_MODEL},
        format="multipart")
    assert response.status_code == 400 and "line 1: the conversation is" in json.dumps(response.json())
    assert not DatasetVersion.objects.filter(dataset=dataset).exists()


def test_an_sft_launch_refuses_a_version_whose_conversation_the_models_context_cannot_hold(client, settings,
                                                                                           tiny_model_dir):
    from webapp.models import Run
    from webapp.models.datasets import DatasetRow

    settings.STUDIO_MODEL_CHECK = "launch"
    project = project_factory()
    agent = agent_factory(project=project, environment_kind="chat", base_model=TEST_TINY_MODEL)
    dataset = dataset_factory(project=project, rows=0)  # uploaded unchecked: rows as they were stored
    version = DatasetVersion.objects.create(dataset=dataset, number=1, source=DatasetVersion.Source.UPLOAD,
                                            note="unchecked", row_count=2)
    long_answer = " ".join(f"fjord{i} is a long narrow inlet" for i in range(400))
    DatasetRow.objects.bulk_create(DatasetRow(version=version, index=i, messages=r["messages"], metadata={})
                                   for i, r in enumerate([_chat("Short."), _chat(long_answer)]))
    client.force_login(project.owner)
    response = client.post(reverse("run-launch", args=[project.id]), _teach_form(project, agent, dataset))
    assert response.status_code == 400
    assert re.search(rf"{dataset.name} v1, conversation 2: the conversation is [\d,]+ tokens, more than the "
                     rf"1,024-token context of {TEST_TINY_MODEL}", response.content.decode())
    assert not Run.objects.exists()
