"""The REST API does what the pages do, with token auth, and documents itself (OpenAPI)."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.webapp.factories import PASSWORD, user_factory
from webapp.models import Run

pytestmark = pytest.mark.django_db


def test_a_token_holder_builds_the_catalogue_and_launches_a_run_through_the_api(judge_double):
    user = user_factory()
    api = APIClient()
    token = api.post("/api/token/", {"username": user.username, "password": PASSWORD}).json()["token"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    project = api.post("/api/projects/", {"name": "api project"}, format="json").json()
    agent = api.post("/api/agents/", {"project": project["id"], "name": "a", "base_model": "var/tiny-model",
                                      "environment_kind": "chat"}, format="json").json()
    scenario_set = api.post("/api/scenario-sets/", {"project": project["id"], "name": "s"}, format="json").json()
    upload = api.post(f"/api/scenario-sets/{scenario_set['id']}/upload/",
                      {"file": SimpleUploadedFile("s.csv", b"user_message\nWhat is the refund policy?\n")},
                      format="multipart")
    assert upload.status_code == 201 and upload.json()["scenario_count"] == 1
    rubric = api.post("/api/rubrics/", {"project": project["id"], "name": "r", "text": "Be faithful.",
                                        "criteria": [{"name": "faithful", "weight": 2}]}, format="json").json()
    judge = api.post("/api/judge-configs/", {"project": project["id"], "name": "j", "model": "openai/judge",
                                             "api_base": judge_double.api_base, "api_key": "sk-secret"},
                     format="json").json()
    judge_double.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                   {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})  # launch's test
    assert "api_key" not in judge and judge["has_stored_key"] is True
    run = api.post("/api/runs/", {"project": project["id"], "name": "api run", "agent": agent["id"],
                                  "scenario_set": scenario_set["id"], "rubric_version": rubric["versions"][0]["id"],
                                  "judge_config": judge["id"], "steps": 3}, format="json")
    assert run.status_code == 201, run.json()
    body = run.json()
    assert body["status"] == "queued" and body["uses_judge"] is True
    assert body["config"]["judge"]["rubric"] == "Be faithful." and body["config"]["judge"]["criteria"][0]["weight"] == 2
    assert body["config"]["judge"]["api_key_env"] == "STUDIO_JUDGE_API_KEY"  # the name, never the key
    assert "sk-secret" not in str(body)
    assert api.post(f"/api/runs/{body['id']}/cancel/").json()["status"] == "cancelled"
    assert Run.objects.get().status == "cancelled"


def test_the_openapi_schema_describes_runs_and_their_controls():
    api = APIClient()
    api.force_authenticate(user_factory())
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ["/api/runs/", "/api/runs/{id}/pause/", "/api/runs/{id}/groups/", "/api/trajectories/{id}/",
                 "/api/scenario-sets/{id}/upload/", "/api/judge-configs/"]:
        assert path in schema["paths"], path
