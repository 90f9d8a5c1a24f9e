"""Issue 43 (part 3), as an ordinary account that creates its own project would fill the database: a dataset
append copied every earlier row (one 4.9 MB row and five tiny appends stored six copies), nothing bounded a
project's rows, bytes, versions, recorded calls, exports or checkpoint disk, and a line of 5,000 nested objects
answered 500. Now: an appended version stores only its new rows (reads unchanged, old versions immutable), each
limit answers 413 (bytes) or 409 (counts) naming the limit and the usage with nothing stored, a too-deep line is
a 400 naming its line, and the project page shows the usage against the limits."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from django.apps import apps as django_apps
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.security.endpoint_upstream import FakeUpstream, agent_client, attackers_run, chat, opening
from tests.webapp.factories import (
    agent_factory, conversation_rows, project_factory, run_factory, scenario_set_factory, user_factory,
)
from webapp.limits import ProjectLimits, parse_limits
from webapp.models import (
    Checkpoint, Dataset, DatasetRow, DatasetVersion, ExternalCall, ModelExport, Project, Run,
)

pytestmark = pytest.mark.django_db


def jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def attacker_api() -> tuple[APIClient, int]:
    """An ordinary account, its own project, and the API with its token."""
    project = project_factory(owner=user_factory())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=project.owner)[0].key}")
    return client, project.id


def new_dataset(client: APIClient, project_id: int, name: str = "chats") -> int:
    created = client.post("/api/datasets/", {"project": project_id, "name": name}, format="json")
    assert created.status_code == 201, created.content
    return created.json()["id"]


def api_upload(client: APIClient, dataset_id: int, data: bytes, mode: str = "append", name: str = "a.jsonl"):
    return client.post(f"/api/datasets/{dataset_id}/upload/", {"file": SimpleUploadedFile(name, data), "mode": mode},
                       format="multipart")


def stored_bytes(dataset_id: int) -> int:
    """What PostgreSQL holds for the dataset's rows, measured in the database (not the app's own count)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(octet_length(r.messages::text)), 0) FROM webapp_datasetrow r "
                       "JOIN webapp_datasetversion v ON v.id = r.version_id WHERE v.dataset_id = %s", [dataset_id])
        return int(cursor.fetchone()[0])


def version_lines(version: DatasetVersion) -> list[dict]:
    return [r.as_json() for r in version.rows.order_by("index")]


def test_a_big_row_and_five_small_appends_store_the_big_row_once():
    client, project_id = attacker_api()
    dataset_id = new_dataset(client, project_id)
    # Just under one conversation's byte limit (STUDIO_MAX_CONVERSATION_BYTES, 1,000,000 by default).
    big = {"messages": [{"role": "user", "content": "x" * 990_000}, {"role": "assistant", "content": "ok"}]}
    small = [{"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello"}]}
             for i in range(5)]
    assert api_upload(client, dataset_id, jsonl([big])).status_code == 201
    for row in small:
        answered = api_upload(client, dataset_id, jsonl([row]))
        assert answered.status_code == 201, answered.content
    # Six versions, six stored rows (not 1 + 2 + ... + 6 = 21), the big one's bytes stored once.
    assert DatasetVersion.objects.filter(dataset_id=dataset_id).count() == 6
    assert DatasetRow.objects.filter(version__dataset_id=dataset_id).count() == 6
    assert 990_000 < stored_bytes(dataset_id) < 1_090_000  # not six copies of it (about 6 MB)
    # Every version still reads its own rows, in order, through the pages' and the API's readers.
    versions = list(DatasetVersion.objects.filter(dataset_id=dataset_id).order_by("number"))
    for number, version in enumerate(versions, start=1):
        assert version.row_count == number
        assert version_lines(version) == [big, *small[:number - 1]]
    last = versions[-1]
    page = client.get(f"/api/dataset-versions/{last.id}/rows/?limit=2&offset=3").json()
    assert page["count"] == 6 and [r["index"] for r in page["results"]] == [3, 4]
    assert [r["messages"] for r in page["results"]] == [small[2]["messages"], small[3]["messages"]]
    exported = client.get(f"/api/dataset-versions/{last.id}/export/")
    assert [json.loads(x) for x in b"".join(exported.streaming_content).decode().splitlines()] == [big, *small]


def test_old_versions_keep_their_rows_after_appends_and_a_replace(client):
    project = project_factory(owner=user_factory())
    client.force_login(project.owner)
    dataset = Dataset.objects.create(project=project, name="support")
    rows = conversation_rows(6)

    def upload(chosen: list[dict], mode: str) -> None:
        answered = client.post(reverse("dataset-detail", args=[dataset.id]),
                               {"file": SimpleUploadedFile("c.jsonl", jsonl(chosen)), "mode": mode})
        assert answered.status_code == 302, answered.content.decode()[-2000:]

    upload(rows[:2], "append")
    upload(rows[2:3], "append")
    upload(rows[3:4], "replace")
    upload(rows[4:6], "append")
    v1, v2, v3, v4 = dataset.versions.order_by("number")
    assert [v.base_id for v in (v1, v2, v3, v4)] == [None, v1.id, None, v3.id]
    assert version_lines(v1) == rows[:2] and version_lines(v2) == rows[:3]
    assert version_lines(v3) == rows[3:4] and version_lines(v4) == [rows[3], *rows[4:6]]
    assert DatasetRow.objects.filter(version__dataset=dataset).count() == 6  # each row stored once
    # The preview of an old version shows its own third row, and the latest's second page starts where it should.
    preview = client.get(reverse("dataset-detail", args=[dataset.id]) + "?version=2").content.decode()
    assert rows[2]["messages"][0]["content"] in preview and rows[4]["messages"][0]["content"] not in preview
    stored = [r.pk for r in DatasetRow.objects.filter(version=v1)]
    upload(rows[:1], "append")
    assert [r.pk for r in DatasetRow.objects.filter(version=v1)] == stored and version_lines(v1) == rows[:2]


LIMITS = {  # limit -> (settings that make the second upload go over it, the usage it names, the status)
    "dataset_rows": ({"dataset_rows": 3}, 2, 409),
    "dataset_bytes": ({"dataset_bytes": 1024}, None, 413),
    "dataset_versions": ({"dataset_versions": 1}, 1, 409),
}


@pytest.mark.parametrize("limit_name", sorted(LIMITS))
def test_each_dataset_limit_refuses_the_upload_that_goes_over_it_naming_limit_and_usage(settings, limit_name):
    values, usage, status = LIMITS[limit_name]
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(**values)
    client, project_id = attacker_api()
    dataset_id = new_dataset(client, project_id)
    first = conversation_rows(2)
    if limit_name == "dataset_bytes":  # the first upload fits, the second's bytes do not
        first = first[:1]
    assert api_upload(client, dataset_id, jsonl(first)).status_code == 201
    before = (DatasetVersion.objects.count(), DatasetRow.objects.count())
    refused = api_upload(client, dataset_id, jsonl(conversation_rows(4)))
    assert refused.status_code == status, refused.content
    body = refused.json()
    stored = DatasetRow.objects.get().size if limit_name == "dataset_bytes" else usage
    assert body["limit_name"] == limit_name and body["usage"] == stored and body["limit"] == values[limit_name]
    assert limit_name in body["detail"] and f"{stored:,}" in body["detail"]
    assert (DatasetVersion.objects.count(), DatasetRow.objects.count()) == before  # nothing stored


def test_the_upload_page_shows_a_limit_as_a_form_error_and_stores_nothing(client, settings):
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(dataset_rows=3)
    project = project_factory(owner=user_factory())
    client.force_login(project.owner)
    dataset = Dataset.objects.create(project=project, name="support")
    url = reverse("dataset-detail", args=[dataset.id])
    assert client.post(url, {"file": SimpleUploadedFile("a.jsonl", jsonl(conversation_rows(2))),
                             "mode": "append"}).status_code == 302
    refused = client.post(url, {"file": SimpleUploadedFile("b.jsonl", jsonl(conversation_rows(2))), "mode": "append"})
    assert refused.status_code == 409
    html = refused.content.decode()
    assert "project limit dataset_rows exceeded" in html and "uses 2 of its 3 dataset rows" in html
    assert dataset.versions.count() == 1 and DatasetRow.objects.count() == 2


def test_recorded_calls_over_the_limit_answer_409_before_the_server_is_asked(settings):
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(recorded_calls=1)
    with FakeUpstream() as upstream:
        run, key = attackers_run(upstream)  # the project token of an ordinary account's own project
        client = agent_client(key)
        assert chat(client, run, {"messages": opening(0)}, trajectory="a").status_code == 200
        refused = chat(client, run, {"messages": opening(1)}, trajectory="b")
        assert refused.status_code == 409, refused.content
        assert refused.json()["limit_name"] == "recorded_calls" and refused.json()["usage"] == 1
        assert len(upstream.chats()) == 1  # never sampled
        assert list(ExternalCall.objects.values_list("trajectory_key", flat=True)) == ["a"]


def test_an_export_over_the_limit_is_refused_on_the_run_page(client, settings):
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(exports=1)
    project = project_factory(owner=user_factory())
    run = run_factory(project=project, status="completed")
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path="", adapter_name="my-run@1")
    ModelExport.objects.create(checkpoint=checkpoint, status=ModelExport.Status.DONE)
    client.force_login(project.owner)
    answered = client.post(reverse("checkpoint-export", args=[checkpoint.pk]), follow=True)
    html = answered.content.decode()
    assert "project limit exports exceeded" in html and "uses 1 of its 1 exports" in html
    assert ModelExport.objects.count() == 1


def test_a_launch_is_refused_once_the_projects_checkpoints_fill_their_disk(settings, tmp_path):
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(checkpoint_bytes=4096)
    client, project_id = attacker_api()
    project = Project.objects.get(pk=project_id)
    run = run_factory(project=project, status="completed")
    adapter = tmp_path / "step_0001"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 5000)
    Checkpoint.objects.create(run=run, step_index=1, path=str(adapter), adapter_name="my-run@1")
    agent, scenario_set = agent_factory(project=project), scenario_set_factory(project=project)
    refused = client.post("/api/runs/", {"project": project_id, "name": "again", "agent": agent.id,
                                         "scenario_set": scenario_set.id}, format="json")
    assert refused.status_code == 413, refused.content
    assert refused.json()["limit_name"] == "checkpoint_bytes" and refused.json()["usage"] == 5000
    assert Run.objects.filter(project_id=project_id).count() == 1


def test_a_line_nested_5000_deep_is_a_400_naming_the_line_via_the_api_and_the_page(client):
    deep = '{"messages": ' + "[" * 5000 + "]" * 5000 + "}"
    data = jsonl(conversation_rows(1)) + b"\n" + deep.encode()
    api, project_id = attacker_api()
    dataset_id = new_dataset(api, project_id)
    refused = api_upload(api, dataset_id, data, name="deep.jsonl")
    assert refused.status_code == 400, refused.content
    assert "deep.jsonl: line 2: the JSON is nested 5001 levels deep" in json.dumps(refused.json())
    dataset = Dataset.objects.get(pk=dataset_id)
    client.force_login(dataset.project.owner)
    page = client.post(reverse("dataset-detail", args=[dataset_id]),
                       {"file": SimpleUploadedFile("deep.jsonl", data), "mode": "append"})
    assert page.status_code == 400 and "line 2: the JSON is nested 5001 levels deep" in page.content.decode()
    assert not DatasetVersion.objects.filter(dataset_id=dataset_id).exists()


def test_the_project_page_shows_its_usage_against_the_limits(client, settings):
    settings.STUDIO_PROJECT_LIMITS = ProjectLimits(dataset_rows=10, dataset_versions=7)
    api, project_id = attacker_api()
    dataset_id = new_dataset(api, project_id)
    assert api_upload(api, dataset_id, jsonl(conversation_rows(2))).status_code == 201
    assert api_upload(api, dataset_id, jsonl(conversation_rows(1))).status_code == 201
    client.force_login(Dataset.objects.get(pk=dataset_id).project.owner)
    html = client.get(reverse("project-detail", args=[project_id])).content.decode()
    assert 'id="project-usage"' in html
    rows_cell = html.split('id="usage-dataset_rows"')[1].split("</tr>")[0]
    versions_cell = html.split('id="usage-dataset_versions"')[1].split("</tr>")[0]
    assert "<td>3</td>" in rows_cell and "<td>10</td>" in rows_cell and "30 %" in rows_cell
    assert "<td>2</td>" in versions_cell and "<td>7</td>" in versions_cell
    for name in ("dataset_bytes", "recorded_calls", "exports", "checkpoint_bytes"):
        assert f'id="usage-{name}"' in html


def test_the_migration_turns_copied_rows_into_shared_ones_without_loss():
    """Versions stored the old way (an append copied its base's rows) read the same after the conversion, and
    a copy that differs from its base keeps its own rows."""
    project = project_factory()
    dataset = Dataset.objects.create(project=project, name="old")
    rows = conversation_rows(5)
    layout = [(None, rows[:2]), (1, rows[:3]), (2, rows[:4]), (None, rows[4:5]), (4, [rows[0], rows[4]])]
    versions = []
    for number, (base, chosen) in enumerate(layout, start=1):
        version = DatasetVersion.objects.create(dataset=dataset, number=number, source="upload",
                                                base=versions[base - 1] if base else None, row_count=len(chosen))
        DatasetRow.objects.bulk_create(DatasetRow(version=version, index=i, messages=r["messages"],
                                                  tools=r.get("tools"), metadata={"line": i + 1})
                                       for i, r in enumerate(chosen))
        versions.append(version)
    migration = importlib.import_module("webapp.migrations.0018_dataset_rows_shared")
    migration.share_rows(django_apps, None)
    converted = [DatasetVersion.objects.get(pk=v.pk) for v in versions]
    for version, (_, chosen) in zip(converted, layout):
        assert version_lines(version) == chosen
    assert DatasetRow.objects.filter(version__dataset=dataset).count() == 2 + 1 + 1 + 1 + 2
    assert converted[4].base_id is None  # its copy differed from its base: it keeps its own rows
    assert all(r.size > 0 for r in DatasetRow.objects.all())


def test_a_bad_limits_setting_stops_the_start():
    assert parse_limits("").dataset_rows == ProjectLimits().dataset_rows
    assert parse_limits('{"exports": 3}').exports == 3
    for bad, named in (('{"rows": 1}', "rows"), ('{"exports": 0}', "exports"), ("[1]", "JSON object"),
                       ("{not json", "not JSON")):
        with pytest.raises(ValueError, match=named):
            parse_limits(bad)
    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "STUDIO_PROJECT_LIMITS": '{"rows": 1}'})
    assert started.returncode != 0 and "STUDIO_PROJECT_LIMITS" in started.stderr and "rows" in started.stderr
