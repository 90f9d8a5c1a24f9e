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
    agent = api.post("/api/agents/", {"project": project["id"], "name": "a", "base_model": "tiny-2048",
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


def _owner_api(run):
    api = APIClient()
    api.force_authenticate(run.project.owner)
    return api


def test_every_nested_list_is_paginated_like_the_top_level_lists_and_the_schema_says_so():
    from tests.webapp.factories import run_factory
    from webapp.models import Checkpoint, Step

    run = run_factory()
    for i in range(3):
        Step.objects.create(run=run, index=i, metrics={"reward_mean": 0.1 * i})
    Checkpoint.objects.create(run=run, step_index=2, path="unused", adapter_name="r@2")
    api = _owner_api(run)
    steps = api.get(f"/api/runs/{run.id}/steps/?limit=2").json()
    assert steps["count"] == 3 and [s["index"] for s in steps["results"]] == [0, 1] and steps["next"]
    assert api.get(f"/api/runs/{run.id}/checkpoints/").json()["results"][0]["step_index"] == 2
    assert api.get(f"/api/runs/{run.id}/review-queue/").json()["count"] == 0
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ["/api/runs/{id}/steps/", "/api/runs/{id}/checkpoints/", "/api/runs/{id}/review-queue/",
                 "/api/trajectories/{id}/overrides/", "/api/runs/{id}/compare/"]:
        ok = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok["$ref"].startswith("#/components/schemas/Paginated"), path


@pytest.mark.parametrize("query, name", [("offset=null", "offset"), ("limit=-1", "limit"), ("limit=abc", "limit"),
                                         ("project=x", "project")])
def test_a_malformed_query_parameter_is_a_400_naming_it(query, name):
    api = APIClient()
    api.force_authenticate(user_factory())
    response = api.get(f"/api/runs/?{query}")
    assert response.status_code == 400 and name in response.json(), response.json()


def test_every_error_has_the_one_shape_with_a_detail_and_the_schema_documents_it():
    from tests.webapp.factories import run_factory

    run = run_factory()
    api = _owner_api(run)
    blank = api.post("/api/projects/", {"name": ""}, format="json")
    assert blank.status_code == 400 and blank.json()["detail"] and blank.json()["name"]
    no_checkpoint = api.post(f"/api/runs/{run.id}/fork/", {"step": 1, "name": "f"}, format="json")
    assert no_checkpoint.status_code == 400 and no_checkpoint.json()["detail"] and no_checkpoint.json()["step"]
    assert set(api.get("/api/runs/999999/").json()) == {"detail"}
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    responses = schema["paths"]["/api/runs/{id}/fork/"]["post"]["responses"]
    assert {"201", "400", "401", "403", "404", "429"} <= set(responses)
    assert "Retry-After" in responses["429"]["headers"]
    name = schema["components"]["schemas"]["ProjectRequest"]["properties"]["name"]
    assert name["minLength"] == 1 and name["pattern"] == r"\S"  # spaces only are refused too
    assert api.post("/api/projects/", {"name": "   "}, format="json").status_code == 400
    assert "Rate limits" in schema["info"]["description"]
