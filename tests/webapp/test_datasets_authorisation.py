"""Who may do what with datasets, written as each caller would try it: the project's owner, an editor, a
reviewer, a viewer, a project token (made for external rollouts, not for the catalogue), a logged-out visitor,
and an ordinary account that made its own project and aims at this project's ids. A refused write stores
nothing. (The generated matrix, tests/webapp/test_authorisation_matrix.py, covers every URL with empty bodies;
these send real files.)"""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import conversation_rows, dataset_factory, member_factory, project_factory, user_factory
from webapp.models import DatasetVersion, Role
from webapp.services.project_tokens import project_token_create

pytestmark = pytest.mark.django_db
ROWS = "\n".join(json.dumps(r) for r in conversation_rows(2)).encode()


@pytest.fixture
def world():
    project = project_factory()
    dataset = dataset_factory(project=project, rows=2)
    outsider = user_factory()
    project_factory(owner=outsider)  # an ordinary account with a project of its own
    users = {"owner": project.owner, "editor": member_factory(project=project, role=Role.EDITOR),
             "reviewer": member_factory(project=project, role=Role.REVIEWER),
             "viewer": member_factory(project=project, role=Role.VIEWER), "outsider": outsider, "anonymous": None}
    token, key = project_token_create(user=project.owner, project=project, name="rollouts")
    return {"project": project, "dataset": dataset, "version": dataset.latest_version, "users": users, "token": key}


def api(world, who: str) -> APIClient:
    client = APIClient()
    if who == "project_token":
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    elif world["users"][who] is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=world['users'][who])[0].key}")
    return client


def page(world, who: str) -> Client:
    client = Client()
    if world["users"][who] is not None:
        client.force_login(world["users"][who])
    return client


# caller -> (read status, write status) for the API; a project token is not an API credential for datasets.
API_EXPECTED = {"owner": (200, 201), "editor": (200, 201), "reviewer": (200, 403), "viewer": (200, 403),
                "project_token": (401, 401), "anonymous": (401, 401), "outsider": (404, 404)}


@pytest.mark.parametrize("who", sorted(API_EXPECTED))
def test_the_dataset_api_lets_each_caller_do_what_its_role_allows(world, who):
    read, write = API_EXPECTED[who]
    client = api(world, who)
    dataset, version = world["dataset"], world["version"]
    before = DatasetVersion.objects.count()
    assert client.get(f"/api/datasets/{dataset.id}/").status_code == read
    assert client.get(f"/api/datasets/{dataset.id}/versions/").status_code == read
    assert client.get(f"/api/dataset-versions/{version.id}/rows/").status_code == read
    exported = client.get(f"/api/dataset-versions/{version.id}/export/")
    assert exported.status_code == read
    if read == 200:
        assert b"Question 2?" in b"".join(exported.streaming_content)
    sent = client.post(f"/api/datasets/{dataset.id}/upload/", {"file": SimpleUploadedFile("x.jsonl", ROWS)},
                       format="multipart")
    assert sent.status_code == write
    assert DatasetVersion.objects.count() == before + (write == 201)
    created = client.post("/api/datasets/", {"project": world["project"].id, "name": f"by {who}"}, format="json")
    assert created.status_code == {201: 201, 403: 403, 401: 401, 404: 404}[write]
    listed = client.get("/api/datasets/")
    if read == 200:
        assert dataset.id in [d["id"] for d in listed.json()["results"]]
    elif who == "outsider":
        assert dataset.id not in [d["id"] for d in listed.json()["results"]]  # never listed, never named


PAGE_EXPECTED = {"owner": (200, 302), "editor": (200, 302), "reviewer": (200, 403), "viewer": (200, 403),
                 "anonymous": (302, 302), "outsider": (404, 404)}


@pytest.mark.parametrize("who", sorted(PAGE_EXPECTED))
def test_the_dataset_pages_let_each_caller_do_what_its_role_allows(world, who):
    read, write = PAGE_EXPECTED[who]
    client = page(world, who)
    dataset, version = world["dataset"], world["version"]
    before = DatasetVersion.objects.count()
    shown = client.get(f"/datasets/{dataset.id}/")
    assert shown.status_code == read
    if who in ("reviewer", "viewer"):
        assert 'id="upload-form"' not in shown.content.decode()  # no form offered to a role that cannot use it
    assert client.get(f"/dataset-versions/{version.id}/export.jsonl").status_code == read
    response = client.post(f"/datasets/{dataset.id}/", {"file": SimpleUploadedFile("x.jsonl", ROWS),
                                                         "mode": "append"})
    assert response.status_code == write
    if write == 302 and who == "anonymous":
        assert "/login/" in response["Location"]
    assert DatasetVersion.objects.count() == before + (write == 302 and who != "anonymous")
    created = client.post(f"/projects/{world['project'].id}/datasets/new/", {"name": f"by {who}"})
    assert created.status_code == write
