"""Datasets: JSONL uploads checked row by row (each bad line named, nothing stored), immutable versions, the
preview (conversations as trajectories are shown, tool calls as blocks, escaped), the export and the API."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import conversation_rows, dataset_factory, project_factory
from webapp.models import Dataset, DatasetRow, DatasetVersion
from webapp.models.catalogue import ImmutableError

pytestmark = pytest.mark.django_db


def jsonl(rows: list) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode()


def owner_client(project) -> Client:
    client = Client()
    client.force_login(project.owner)
    return client


def api_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def upload(client, dataset, data: bytes, mode: str = "append", name: str = "chats.jsonl"):
    return client.post(reverse("dataset-detail", args=[dataset.id]),
                       {"file": SimpleUploadedFile(name, data), "mode": mode})


def test_an_upload_makes_a_version_whose_preview_shows_the_conversations_escaped():
    project = project_factory()
    dataset = Dataset.objects.create(project=project, name="support")
    rows = conversation_rows(3)
    rows[2]["messages"][1]["content"] = "<script>alert(1)</script> & done"
    response = upload(owner_client(project), dataset, jsonl([rows[0], "", rows[1], rows[2]]))
    assert response.status_code == 302
    version = dataset.versions.get()
    assert (version.number, version.row_count, version.source) == (1, 3, "upload")
    stored = list(version.rows.order_by("index"))
    assert [r.as_json() for r in stored] == rows
    assert [r.metadata["line"] for r in stored] == [1, 3, 4]  # the file's lines, blank ones counted
    page = owner_client(project).get(reverse("dataset-detail", args=[dataset.id])).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; done" in page and "<script>alert(1)" not in page
    assert 'data-tool="lookup"' in page and "a long narrow inlet" in page  # the call with its result, as a block
    assert "line 4 of chats.jsonl" in page


def test_a_file_with_bad_rows_names_each_one_and_stores_nothing():
    project = project_factory()
    dataset = dataset_factory(project=project, rows=2)
    good = conversation_rows(1)[0]
    bad = [good, "{oops", {"messages": [{"role": "user", "content": "no answer"}]},
           {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 1}]}]
    response = upload(owner_client(project), dataset, jsonl(bad))
    assert response.status_code == 400
    page = response.content.decode()
    assert "chats.jsonl: line 2: not valid JSON" in page
    assert "chats.jsonl: line 3: no assistant message" in page
    assert "chats.jsonl: line 4: messages.1.weight: Extra inputs are not permitted" in page
    assert dataset.versions.count() == 1 and DatasetRow.objects.filter(version__dataset=dataset).count() == 2


def test_a_file_over_the_upload_limit_is_refused_naming_both_sizes_and_stores_nothing(settings):
    settings.STUDIO_MAX_UPLOAD_BYTES = 1000
    project = project_factory()
    dataset = dataset_factory(project=project, rows=2)
    data = jsonl(conversation_rows(20))
    response = upload(owner_client(project), dataset, data)
    assert response.status_code == 400
    assert f"the file is {len(data):,} bytes; the limit is 1,000 bytes" in response.content.decode()
    assert dataset.versions.count() == 1 and DatasetRow.objects.filter(version__dataset=dataset).count() == 2


def test_append_keeps_the_latest_rows_replace_does_not_and_versions_never_change():
    project = project_factory()
    dataset = dataset_factory(project=project, rows=2)
    client = owner_client(project)
    extra = [{"messages": [{"role": "user", "content": "new"}, {"role": "assistant", "content": "row"}]}]
    assert upload(client, dataset, jsonl(extra)).status_code == 302
    assert upload(client, dataset, jsonl(extra), mode="replace").status_code == 302
    v1, v2, v3 = dataset.versions.order_by("number")
    assert (v1.row_count, v2.row_count, v3.row_count) == (2, 3, 1)
    assert v2.base_id == v1.id and v3.base_id is None
    assert [r.as_json() for r in v2.rows.order_by("index")][:2] == [r.as_json() for r in v1.rows.order_by("index")]
    with pytest.raises(ImmutableError):
        v1.note = "rewritten"
        v1.save()


def test_the_export_is_the_version_as_jsonl_and_uploads_back_unchanged():
    project = project_factory()
    dataset = dataset_factory(project=project, rows=4)
    version = dataset.latest_version
    client = owner_client(project)
    response = client.get(reverse("dataset-export", args=[version.id]))
    assert response.status_code == 200 and response["Content-Type"].startswith("application/jsonl")
    assert f'filename="{dataset.name}-v1.jsonl"' in response["Content-Disposition"]
    body = b"".join(response.streaming_content)
    assert [json.loads(line) for line in body.decode().splitlines()] == conversation_rows(4)
    assert upload(client, dataset, body, mode="replace").status_code == 302
    assert [r.as_json() for r in dataset.latest_version.rows.order_by("index")] == conversation_rows(4)


def test_the_api_creates_uploads_lists_pages_and_exports():
    project = project_factory()
    client = api_client(project.owner)
    created = client.post("/api/datasets/", {"project": project.id, "name": "chats"}, format="json")
    assert created.status_code == 201, created.content
    dataset_id = created.json()["id"]
    # a name the project uses already: 409, as for every catalogue object (documented in the schema)
    assert client.post("/api/datasets/", {"project": project.id, "name": "chats"}, format="json").status_code == 409
    sent = client.post(f"/api/datasets/{dataset_id}/upload/",
                       {"file": SimpleUploadedFile("a.jsonl", jsonl(conversation_rows(5)))}, format="multipart")
    assert sent.status_code == 201 and sent.json()["number"] == 1 and sent.json()["row_count"] == 5
    refused = client.post(f"/api/datasets/{dataset_id}/upload/",
                          {"file": SimpleUploadedFile("b.jsonl", b'{"messages": []}\n{"x": 1}')}, format="multipart")
    assert refused.status_code == 400
    errors = json.dumps(refused.json())
    assert "b.jsonl: line 1: messages:" in errors and "b.jsonl: line 2: messages: Field required" in errors
    assert DatasetVersion.objects.filter(dataset_id=dataset_id).count() == 1  # nothing stored from b.jsonl
    detail = client.get(f"/api/datasets/{dataset_id}/").json()
    assert detail["latest_version"]["row_count"] == 5
    versions = client.get(f"/api/datasets/{dataset_id}/versions/").json()
    version_id = versions["results"][0]["id"]
    rows = client.get(f"/api/dataset-versions/{version_id}/rows/?limit=2&offset=1").json()
    assert rows["count"] == 5 and [r["index"] for r in rows["results"]] == [1, 2]
    assert rows["results"][0]["messages"] == conversation_rows(5)[1]["messages"]
    exported = client.get(f"/api/dataset-versions/{version_id}/export/")
    assert [json.loads(x) for x in b"".join(exported.streaming_content).decode().splitlines()] == conversation_rows(5)
    listed = client.get(f"/api/datasets/?project={project.id}").json()
    assert [d["name"] for d in listed["results"]] == ["chats"]


def test_a_row_holding_an_escaped_null_character_is_refused_and_nothing_is_stored():
    project = project_factory()
    dataset = Dataset.objects.create(project=project, name="nul")
    row = '{"messages": [{"role": "user", "content": "a\\u0000b"}, {"role": "assistant", "content": "ok"}]}'
    response = upload(owner_client(project), dataset, row.encode())
    assert response.status_code == 400 and "null character" in response.content.decode()
    assert not dataset.versions.exists()
