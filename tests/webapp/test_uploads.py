"""Hostile uploads are refused with a clear error and write nothing: oversized files (read no further than the
limit), wrong encodings, zip bombs and other archives, CSV injection; through the page and the API."""
from __future__ import annotations

import gzip
import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import project_factory, scenario_set_factory

pytestmark = pytest.mark.django_db


def _zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("scenarios.csv", b"id,user_message\n" + b"0" * (50 << 20))  # 50 MiB from ~50 KiB
    return buffer.getvalue()


HOSTILE = [
    ("oversized.csv", b"id,user_message\n" + b"q,hello\n" * 800_000, "the limit"),
    ("latin1.csv", "id,user_message\nq1,caf\xe9 cr\xe8me\n".encode("latin-1"), "not UTF-8"),
    ("utf16.csv", "id,user_message\nq1,hello\n".encode("utf-16"), "not UTF-8"),
    ("bomb.zip", _zip_bomb(), "not UTF-8"),
    ("archive.zip", b"id,user_message\nq1,hi\n", "upload a .csv or .jsonl"),
    ("bomb.csv", _zip_bomb(), "not UTF-8"),
    ("gzipped.jsonl", gzip.compress(b'{"user_message": "hi"}\n' * 1000), "not UTF-8"),
    ("formula.csv", b'id,user_message\nq1,fine\nq2,"=HYPERLINK(""http://evil"",""x"")"\n', "row 3: user_message starts with '='"),
    ("formula-id.csv", b"id,user_message\n@SUM(1+1),fine\n", "row 2: id starts with '@'"),
    ("formula.jsonl", b'{"user_message": "+cmd|\' /C calc\'!A0"}\n', "row 1: user_message starts with '+'"),
    ("dash.csv", b"id,user_message\nq1,-2+3+cmd|' /C calc'!A0\n", "starts with '-'"),
    ("nul.csv", b"id,user_message\nq1,hi\x00there\n", "row 2: holds a null character (U+0000)"),
    ("nul.jsonl", b'{"user_message": "hi", "metadata": {"k": "\\u0000"}}\n', "row 1: holds a null character"),
]


@pytest.mark.parametrize("name, data, message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_upload_is_refused_with_a_clear_error_and_imports_nothing(client, name, data, message):
    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=1)
    client.force_login(project.owner)
    page = client.post(reverse("scenario-set-detail", args=[scenario_set.id]),
                       {"action": "upload", "file": SimpleUploadedFile(name, data)})
    assert page.status_code == 400 and message.replace("'", "&#x27;") in page.content.decode()
    api = APIClient()
    api.force_authenticate(project.owner)
    response = api.post(f"/api/scenario-sets/{scenario_set.id}/upload/", {"file": SimpleUploadedFile(name, data)},
                        format="multipart")
    assert response.status_code == 400 and message in str(response.json())
    assert list(scenario_set.scenarios.values_list("external_id", flat=True)) == ["s1"]  # nothing written


def test_list_items_are_not_mistaken_for_formulas(client):
    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=0)
    client.force_login(project.owner)
    data = b"id,user_message\nq1,- first item\nq2,What is -5 degrees in Fahrenheit?\n"
    response = client.post(reverse("scenario-set-detail", args=[scenario_set.id]),
                           {"action": "upload", "file": SimpleUploadedFile("ok.csv", data)})
    assert response.status_code == 302
    assert list(scenario_set.scenarios.order_by("external_id").values_list("external_id", "user_message")) == [
        ("q1", "- first item"), ("q2", "What is -5 degrees in Fahrenheit?")]  # stored as written, not escaped
