"""The OpenAPI schema is usable, not just valid: a client that knows the API only through the schema (it finds
each call by operationId, checks every request body against the schema before sending it and every answer
against the schema after) drives one whole path: an agent, a scenario set and a rubric, a launched run, its
steps, and a score override."""
from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from rest_framework.test import APIClient

from tests.judge_double import JudgeDouble
from tests.webapp.factories import PASSWORD, user_factory
from webapp.execution.executors import wait_idle

pytestmark = pytest.mark.django_db(transaction=True)


class SchemaClient:
    """Calls the API by operationId; refuses a body the schema refuses and fails on an answer it does not
    describe (status or shape)."""

    def __init__(self, http: APIClient, schema: dict[str, Any]) -> None:
        self.http, self.schema = http, schema
        self.operations = {op["operationId"]: (method, path, op)
                           for path, ops in schema["paths"].items() for method, op in ops.items()}

    def _resolve(self, node: Any) -> Any:
        """$refs inlined, and OpenAPI 3.0's `nullable` as JSON Schema's null type and its boolean
        `exclusiveMinimum`/`exclusiveMaximum` (beside `minimum`/`maximum`) as the numbers JSON Schema uses."""
        if isinstance(node, list):
            return [self._resolve(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return self._resolve(copy.deepcopy(self.schema["components"]["schemas"][node["$ref"].split("/")[-1]]))
        out = {k: self._resolve(v) for k, v in node.items() if k != "nullable"}
        for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if out.get(exclusive) is True:
                out[exclusive] = out.pop(bound)
            elif out.get(exclusive) is False:
                del out[exclusive]
        if node.get("nullable"):
            out = {"anyOf": [out, {"type": "null"}]}
        return out

    def __call__(self, operation_id: str, *, body: dict | None = None, **params: Any) -> Any:
        method, path, op = self.operations[operation_id]
        if body is not None:
            jsonschema.validate(body, self._resolve(op["requestBody"]["content"]["application/json"]["schema"]))
        url = path.format(**{k: v for k, v in params.items() if "{" + k + "}" in path})
        query = {k: v for k, v in params.items() if "{" + k + "}" not in path}
        response = self.http.generic(method.upper(), url + ("?" + "&".join(f"{k}={v}" for k, v in query.items())
                                                            if query else ""),
                                     data=None if body is None else json.dumps(body),
                                     content_type="application/json")
        documented = op["responses"].get(str(response.status_code))
        assert documented is not None, f"{operation_id}: undocumented {response.status_code}: {response.content!r}"
        data = response.json()
        jsonschema.validate(data, self._resolve(documented["content"]["application/json"]["schema"]))
        assert response.status_code < 400, f"{operation_id}: {response.status_code} {data}"
        return data


def test_a_client_that_knows_only_the_schema_launches_a_run_reads_its_steps_and_overrides_a_score(
        inprocess_executor, scripted_engine):
    user = user_factory()
    http = APIClient()
    schema = http.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    api = SchemaClient(http, schema)
    token = api("token_create", body={"username": user.username, "password": PASSWORD})["token"]
    http.credentials(HTTP_AUTHORIZATION=f"Token {token}")

    with pytest.raises(jsonschema.ValidationError):  # the schema says what the server refuses: a blank name
        api("projects_create", body={"name": ""})
    project = api("projects_create", body={"name": "typed client"})
    agent = api("agents_create", body={"project": project["id"], "name": "helper", "base_model": "tiny-2048",
                                       "environment_kind": "chat", "system_prompt": "Answer briefly."})
    scenario_set = api("scenario_sets_create", body={"project": project["id"], "name": "questions"})
    for k in range(2):
        api("scenario_sets_scenarios_create", id=scenario_set["id"],
            body={"user_message": f"Question {k}?", "external_id": f"q{k}"})
    rubric = api("rubrics_create", body={"project": project["id"], "name": "faithful", "text": "Be faithful.",
                                         "criteria": [{"name": "faithful", "weight": 1.0}]})
    with JudgeDouble() as judge:
        judge_config = api("judge_configs_create", body={"project": project["id"], "name": "double",
                                                         "model": "openai/judge", "api_base": judge.api_base,
                                                         "api_key": "test"})
        judge.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})  # launch's test
        run = api("runs_create", body={"project": project["id"], "name": "typed run", "agent": agent["id"],
                                       "scenario_set": scenario_set["id"], "judge_config": judge_config["id"],
                                       "rubric_version": rubric["versions"][0]["id"], "steps": 2, "group_size": 2,
                                       "groups_per_step": 1, "learning_rate": 0.001})
        wait_idle(timeout=120)
    assert api("runs_retrieve", id=run["id"])["status"] == "completed"

    steps = api("runs_steps_list", id=run["id"])
    assert steps["count"] == 2 and [s["index"] for s in steps["results"]] == [1, 2]
    groups = api("runs_groups_list", id=run["id"], step=1)
    trajectory = groups["results"][0]["trajectories"][0]
    record = api("trajectories_override_create", id=trajectory["id"], body={"score": 0.25, "reason": "too vague"})
    assert record["after"] == 0.25 and record["trajectory_label"] == trajectory["label"]
    assert api("trajectories_retrieve", id=trajectory["id"])["review"]["human_score"] == 0.25
    audit = api("trajectories_overrides_list", id=trajectory["id"])
    assert audit["count"] == 1 and audit["results"][0]["reason"] == "too vague"
