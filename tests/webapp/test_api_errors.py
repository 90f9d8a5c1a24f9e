"""Every answer under /api/ is the API's JSON error shape, including the ones Django gives before DRF sees the
request (a path no route matches, e.g. an id that is not a whole number); the API takes each value in the JSON
type its schema states; an id in a body that names nothing is a 404 like one in the path; and the schema states
the bounds the API enforces (Schemathesis checks all of this broadly, test_api_contract.py; these pin it)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.webapp.factories import agent_factory, judge_factory, project_factory

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    project = project_factory()
    client = APIClient()
    client.force_authenticate(project.owner)
    client.project = project
    return client


@pytest.mark.parametrize("path", ["/api/runs/abc/rollouts/", "/api/runs/0.5/steps/", "/api/runs/1e3/openai/v1/models",
                                  "/api/agents/-3.7e-204/", "/api/no-such-route/"])
def test_a_path_no_api_route_matches_is_a_json_404(api, path):
    answer = api.get(path)
    assert answer.status_code == 404 and answer["Content-Type"] == "application/json"
    assert "no API route" in answer.json()["detail"]


def test_a_page_path_that_matches_nothing_is_still_a_page(client):
    answer = client.get("/no-such-page/")
    assert answer.status_code == 404 and answer["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("body, field", [({"name": "p", "description": 0}, "description"), ({"name": 7}, "name")])
def test_a_number_where_the_schema_says_text_is_refused_not_stored_as_text(api, body, field):
    answer = api.post("/api/projects/", body)
    assert answer.status_code == 400 and answer.json()[field] == ["Not a valid string."]


def test_numbers_booleans_and_decimals_come_in_the_type_the_schema_states(api):
    agent = agent_factory(project=api.project)
    judge = judge_factory(project=api.project)
    assert api.patch(f"/api/agents/{agent.id}/", {"temperature": False}).status_code == 400
    assert api.patch(f"/api/agents/{agent.id}/", {"max_tokens": "12"}).status_code == 400
    assert api.patch(f"/api/agents/{agent.id}/", {"environment_options": 0}).status_code == 400
    assert api.patch(f"/api/judge-configs/{judge.id}/", {"budget_usd": 5}).status_code == 400
    assert api.patch(f"/api/judge-configs/{judge.id}/", {"clear_api_key": "true"}).status_code == 400
    answer = api.patch(f"/api/judge-configs/{judge.id}/", {"budget_usd": "5.00", "temperature": 0.5})
    assert answer.status_code == 200 and answer.json()["budget_usd"] == "5.00"


def test_an_id_in_a_body_that_names_nothing_is_a_404_like_one_in_the_path(api):
    answer = api.post("/api/agents/", {"project": 0, "name": "a", "base_model": "tiny-2048",
                                       "environment_kind": "chat"})
    assert answer.status_code == 404 and "No project with that id" in answer.json()["detail"]


def test_the_schema_states_the_bounds_the_api_enforces(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    runs = {p["name"]: p["schema"] for p in schema["paths"]["/api/runs/"]["get"]["parameters"]}
    assert runs["project"]["minimum"] == 1 and api.get("/api/runs/?project=0").status_code == 400
    components = schema["components"]["schemas"]
    agent = components["AgentRequest"]["properties"]
    assert (agent["temperature"]["minimum"], agent["temperature"]["maximum"]) == (0, 2)
    assert agent["top_p"]["exclusiveMinimum"] is True and agent["environment_options"]["type"] == "object"
    assert components["GroupSubmissionRequest"]["properties"]["trajectories"]["minItems"] == 1
    assert components["CriterionRequest"]["properties"]["name"]["pattern"].startswith("^[A-Za-z]")
    assert schema["paths"]["/api/agents/"]["post"]["requestBody"]["content"].keys() == {"application/json"}
