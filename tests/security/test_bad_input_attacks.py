"""Issue 43 (part 5): bad input answered with a named 400, never a 500, tried as an ordinary account with its own
project (and its token) would: integers beyond 64 bits in query and path parameters, JSON nested thousands of
levels deep in request bodies and options, an upload refused with a body that is not JSON, a duplicate name
answered with a status the schema does not state. Each answer is JSON where it is the API's, names what was
wrong, and changes nothing."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import (
    agent_factory, dataset_factory, judge_factory, project_factory, rubric_factory, run_factory,
    scenario_set_factory,
)
from webapp.models import Agent, Run, Trajectory

pytestmark = pytest.mark.django_db

HUGE = str(10**24)
HUGER = str(10**31)


def _api(user) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return api


@pytest.fixture
def world():
    project = project_factory()
    run = run_factory(project=project, status="completed")
    return {"project": project, "run": run, "api": _api(project.owner)}


@pytest.mark.parametrize("path,name", [
    ("/api/runs/?project={huge}", "project"),
    ("/api/runs/{run}/compare/?t={huger}", "t"),
    ("/api/runs/{run}/groups/?step={huge}", "step"),
    ("/api/runs/?limit=10&offset={huge}", "offset"),
])
def test_an_api_query_integer_beyond_64_bits_is_a_400_naming_it(world, path, name):
    url = path.format(huge=HUGE, huger=HUGER, run=world["run"].pk)
    response = world["api"].get(url)
    assert response.status_code == 400, (url, response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json" and name in response.json(), response.content


@pytest.mark.parametrize("path", ["/api/runs/{huge}/", "/api/projects/{huge}/", "/api/runs/{huge}/compare/?t=1",
                                  "/api/checkpoints/{huge}/openai/v1/models"])
def test_an_api_path_id_beyond_64_bits_is_no_such_object_not_a_500(world, path):
    response = world["api"].get(path.format(huge=HUGE))
    assert response.status_code in (400, 404), (path, response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize("page,name", [
    ("try-page", "agent"), ("try-page", "checkpoint"), ("run-launch", "agent"), ("distillation-create", "dataset"),
])
def test_a_page_query_integer_beyond_64_bits_is_a_400_naming_it(client, world, page, name):
    client.force_login(world["project"].owner)
    response = client.get(reverse(page, args=[world["project"].pk]) + f"?{name}={HUGE}")
    assert response.status_code == 400 and name in response.content.decode()


@pytest.mark.parametrize("page,name", [("run-compare", "t"), ("run-export", "step"), ("run-groups", "offset")])
def test_a_run_page_query_integer_beyond_64_bits_is_a_400_naming_it(client, world, page, name):
    client.force_login(world["project"].owner)
    response = client.get(reverse(page, args=[world["run"].pk]) + f"?{name}={HUGER}")
    assert response.status_code == 400 and name in response.content.decode()


def test_a_page_path_id_beyond_64_bits_is_not_found(client, world):
    client.force_login(world["project"].owner)
    for url in (f"/projects/{HUGE}/", f"/runs/{HUGE}/", f"/try/{HUGE}/"):
        assert client.get(url).status_code == 404, url


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [40, 100_000])
def test_an_api_body_nested_deeper_than_the_limit_is_a_400_naming_the_body(world, depth):
    body = ('{"project": %d, "name": "deep", "base_model": "tiny-2048", "environment_kind": "chat", '
            '"environment_options": %s}') % (world["project"].pk, _nested(depth))
    response = world["api"].post("/api/agents/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert "nests deeper than 32 levels" in response.json()["body"][0]
    assert not Agent.objects.filter(name="deep").exists()


def test_a_shallow_body_still_passes_the_depth_rule(world):
    body = {"project": world["project"].pk, "name": "shallow", "base_model": "tiny-2048",
            "environment_kind": "chat", "environment_options": json.loads(_nested(5))}
    response = world["api"].post("/api/agents/", body, format="json")
    assert response.status_code != 400 or "body" not in response.json(), response.content


def test_an_api_id_beyond_64_bits_in_a_body_is_a_400_naming_the_field(world):
    body = {"project": 10**24, "name": "huge", "base_model": "tiny-2048", "environment_kind": "chat"}
    response = world["api"].post("/api/agents/", body, format="json")
    assert response.status_code == 400 and "project" in response.json(), response.content
    assert world["api"].post("/api/agents/", {**body, "project": str(10**24)}, format="json").status_code == 400
    assert not Agent.objects.filter(name="huge").exists()


@pytest.mark.parametrize("depth", [40, 100_000])
def test_environment_options_nested_too_deep_on_the_agent_page_are_refused_beside_the_field(client, world, depth):
    client.force_login(world["project"].owner)
    response = client.post(reverse("agent-create", args=[world["project"].pk]), {
        "name": "deep", "base_model": "tiny-2048", "environment_kind": "chat", "environment_options": _nested(depth),
        "system_prompt": "Answer.", "temperature": 1.0, "top_p": 1.0, "max_tokens": 64})
    assert response.status_code == 400 and "nests deeper than 32 levels" in response.content.decode()
    assert not Agent.objects.filter(name="deep").exists()


@pytest.mark.parametrize("depth", [40, 100_000])
def test_run_overrides_nested_too_deep_on_the_launch_api_are_a_400(world, depth):
    body = '{"project": %d, "name": "deep-run", "overrides": %s}' % (world["project"].pk, _nested(depth))
    response = world["api"].post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400 and "body" in response.json(), response.content[:300]
    assert not Run.objects.filter(name="deep-run").exists()


@pytest.mark.parametrize("kind", ["scenario-sets", "datasets"])
@pytest.mark.parametrize("accept", ["text/html,application/xhtml+xml", "text/csv"])
def test_an_upload_refusal_is_json_whatever_the_client_accepts(world, settings, kind, accept):
    """A browser-like client (Accept: text/html) was answered DRF's HTML page; a CSV-only one a 406."""
    settings.STUDIO_MAX_UPLOAD_BYTES = 2048
    project = world["project"]
    target = scenario_set_factory(project=project, scenarios=0) if kind == "scenario-sets" \
        else dataset_factory(project=project, rows=1)
    versions = target.versions.count() if kind == "datasets" else None
    for data in ({"file": SimpleUploadedFile("s.csv", b"id,user_message\n" + b"a,b\n" * 2000)},
                 {"file": SimpleUploadedFile("s.csv", b"\xff\xfe")}, {}):
        response = world["api"].post(f"/api/{kind}/{target.pk}/upload/", data, format="multipart",
                                     HTTP_ACCEPT=accept)
        assert response.status_code == 400 and response["Content-Type"] == "application/json", response.content[:200]
        assert "file" in response.json()
    if kind == "datasets":
        assert target.versions.count() == versions
    else:
        assert target.scenarios.count() == 0


@pytest.mark.parametrize("path,body", [
    ("/api/rubrics/", {"name": "mine", "text": "Be good."}),
    ("/api/agents/", {"name": "mine", "base_model": "tiny-2048", "environment_kind": "chat"}),
    ("/api/scenario-sets/", {"name": "mine"}),
    ("/api/judge-configs/", {"name": "mine", "model": "openai/x"}),
    ("/api/datasets/", {"name": "mine"}),
])
def test_a_duplicate_name_is_a_conflict_the_schema_states(world, path, body):
    api, project = world["api"], world["project"]
    assert api.post(path, {"project": project.pk, **body}, format="json").status_code == 201
    again = api.post(path, {"project": project.pk, **body}, format="json")
    assert again.status_code == 409 and "already exists" in again.json()["detail"], again.content
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert "409" in schema["paths"][path]["post"]["responses"]


@pytest.mark.django_db(transaction=True)
def test_another_projects_token_cannot_tell_a_checkpoint_that_exists_from_one_that_does_not():
    from webapp.models import Checkpoint
    from webapp.services.project_tokens import project_token_create

    victim = project_factory()
    run = run_factory(project=victim, status="completed")
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path="/srv/runs/x/step-1", adapter_name="x@1")
    intruder = project_factory()
    _, key = project_token_create(user=intruder.owner, project=intruder, name="theirs")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    missing = Checkpoint.objects.order_by("-pk").first().pk + 1000
    for suffix, method, body in (("models", "get", None), ("chat/completions", "post",
                                                           {"messages": [{"role": "user", "content": "x"}]})):
        answers = []
        for target in (checkpoint.pk, missing):
            response = getattr(api, method)(f"/api/checkpoints/{target}/openai/v1/{suffix}", body, format="json")
            answers.append((response.status_code, response.json()))
        assert answers[0] == answers[1] == (404, {"detail": "no such checkpoint"}), answers
    other_project = api.get(f"/api/projects/{victim.pk}/openai/v1/models")
    assert other_project.status_code == 404 and other_project.json() == {"detail": "no such project"}
