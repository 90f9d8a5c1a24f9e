"""Bad input gives a clear error and changes nothing: uploads, run configs, oversized fields."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import agent_factory, project_factory, scenario_set_factory
from webapp.models import Agent, Run, Scenario

pytestmark = pytest.mark.django_db


def _upload(client, scenario_set, name: str, data: bytes):
    return client.post(reverse("scenario-set-detail", args=[scenario_set.id]),
                       {"action": "upload", "file": SimpleUploadedFile(name, data)})


@pytest.fixture
def editor_client(client):
    project = project_factory()
    client.force_login(project.owner)
    client.project = project
    return client


def test_a_valid_csv_upload_imports_every_row(editor_client):
    scenario_set = scenario_set_factory(project=editor_client.project, scenarios=0)
    data = b"id,user_message,context,split\nq1,What is the refund policy?,Refunds within 30 days.,train\nq2,Hi,,validation\n"
    assert _upload(editor_client, scenario_set, "s.csv", data).status_code == 302
    assert list(scenario_set.scenarios.values_list("external_id", "split")) == [("q1", "train"), ("q2", "validation")]


def test_a_csv_with_bad_rows_names_each_row_and_imports_nothing(editor_client):
    scenario_set = scenario_set_factory(project=editor_client.project, scenarios=0)
    data = b"id,user_message,split\nok,fine,train\nbad,,train\ndup,x,sideways\nok,again,train\n"
    response = _upload(editor_client, scenario_set, "s.csv", data)
    html = response.content.decode()
    assert response.status_code == 400
    assert "row 3: user_message is empty" in html
    assert "row 4: split &#x27;sideways&#x27; must be one of train, validation" in html
    assert "row 5: id &#x27;ok&#x27; repeats row 2" in html
    assert scenario_set.scenarios.count() == 0


def test_a_malformed_jsonl_upload_reports_the_line_and_imports_nothing(editor_client):
    scenario_set = scenario_set_factory(project=editor_client.project, scenarios=0)
    data = b'{"user_message": "one"}\n{"user_message": "two",\n["not", "an", "object"]\n{"user_mesage": "typo"}\n'
    html = _upload(editor_client, scenario_set, "s.jsonl", data).content.decode()
    assert "row 2: not valid JSON" in html and "row 3: each line must be a JSON object" in html
    assert "row 4: unknown key(s) &#x27;user_mesage&#x27;" in html
    assert scenario_set.scenarios.count() == 0


def test_an_upload_that_is_not_text_or_has_no_known_type_is_refused(editor_client):
    scenario_set = scenario_set_factory(project=editor_client.project, scenarios=0)
    assert "not UTF-8" in _upload(editor_client, scenario_set, "s.csv", b"\xff\xfe\x00bin").content.decode()
    assert "upload a .csv or .jsonl" in _upload(editor_client, scenario_set, "s.xlsx", b"x").content.decode()
    assert scenario_set.scenarios.count() == 0


def test_an_upload_with_an_id_already_in_the_set_imports_nothing(editor_client):
    scenario_set = scenario_set_factory(project=editor_client.project, scenarios=2)  # s1, s2
    html = _upload(editor_client, scenario_set, "s.jsonl", b'{"id": "s9", "user_message": "a"}\n'
                                                        b'{"id": "s2", "user_message": "b"}\n').content.decode()
    assert "id &#x27;s2&#x27; already exists in this set" in html
    assert scenario_set.scenarios.count() == 2


def test_an_oversized_field_is_refused_with_its_limit(editor_client):
    scenario_set = scenario_set_factory(project=editor_client.project, scenarios=0)
    row = json.dumps({"user_message": "x" * 20_001}).encode()
    assert "user_message is 20,001 characters; the limit is 20,000" in _upload(
        editor_client, scenario_set, "s.jsonl", row).content.decode()
    response = editor_client.post(reverse("agent-create", args=[editor_client.project.id]), {
        "name": "a" * 201, "base_model": "tiny-2048", "environment_kind": "chat", "temperature": 1, "top_p": 1,
        "max_tokens": 10})
    assert response.status_code == 400 and b"at most 200 characters" in response.content
    assert Agent.objects.count() == 0 and Scenario.objects.count() == 0


def test_an_invalid_engine_setting_in_the_launch_form_names_the_key_and_launches_nothing(editor_client):
    project = editor_client.project
    agent, scenario_set = agent_factory(project=project), scenario_set_factory(project=project)
    form = {"name": "r", "agent": agent.id, "scenario_set": scenario_set.id, "steps": 2, "group_size": 2,
            "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0}
    bad_key = editor_client.post(reverse("run-launch", args=[project.id]), {**form, "overrides": '{"grpo": {"lr": 1}}'})
    assert bad_key.status_code == 400 and b"grpo.lr: Extra inputs are not permitted" in bad_key.content
    bad_json = editor_client.post(reverse("run-launch", args=[project.id]), {**form, "overrides": '{"grpo": '})
    assert bad_json.status_code == 400 and b"not valid JSON" in bad_json.content
    too_small = editor_client.post(reverse("run-launch", args=[project.id]), {**form, "group_size": 1})
    assert too_small.status_code == 400 and b"greater than or equal to 2" in too_small.content
    assert Run.objects.count() == 0


def test_the_api_rejects_an_invalid_config_with_the_engines_message():
    project = project_factory()
    api = APIClient()
    api.force_authenticate(project.owner)
    agent, scenario_set = agent_factory(project=project), scenario_set_factory(project=project)
    response = api.post("/api/runs/", {"project": project.id, "name": "r", "agent": agent.id,
                                       "scenario_set": scenario_set.id, "overrides": {"steps": 0}}, format="json")
    assert response.status_code == 400 and "steps: Input should be greater than or equal to 1" in str(response.json())
    assert Run.objects.count() == 0


def test_inline_validation_returns_field_errors_without_saving(editor_client):
    response = editor_client.post(reverse("agent-create", args=[editor_client.project.id]),
                                  {"_validate": "1", "name": "", "temperature": "7"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="err-temperature" hx-swap-oob="true"' in html and "less than or equal to 2.0" in html
    assert 'id="err-name"' in html and "This field is required" in html
    assert Agent.objects.count() == 0


def test_a_rubric_version_is_immutable_and_a_new_version_gets_the_next_number(editor_client):
    project = editor_client.project
    editor_client.post(reverse("rubric-create", args=[project.id]), {
        "name": "support", "text": "Prefer faithful answers.", "criteria": "faithful | 2 | uses only the context"})
    rubric = project.rubrics.get()
    first = rubric.versions.get()
    assert first.criteria == [{"name": "faithful", "description": "uses only the context", "weight": 2.0}]
    first.text = "edited"
    with pytest.raises(RuntimeError, match="immutable"):
        first.save()
    editor_client.post(reverse("rubric-detail", args=[rubric.id]), {"text": "Prefer concise answers."})
    assert list(rubric.versions.order_by("number").values_list("number", "text")) == [
        (1, "Prefer faithful answers."), (2, "Prefer concise answers.")]
    bad = editor_client.post(reverse("rubric-detail", args=[rubric.id]), {"text": "x", "criteria": "no weight"})
    assert bad.status_code == 400 and rubric.versions.count() == 2
