"""Issue 43 (part 4): one account could hold every `serve` worker. Each Try it session may start a server per
(project, base model), projects are free to create, and nothing counted what an account held. Written as an
ordinary account that creates its own projects would try: it starts sessions, servers and distillations until the
caps answer 429 naming the cap and its usage; the Try it page names the session (or server) to end, with a button
that ends it, after which the next request goes through. An editor of someone else's project meets that project's
cap. Nothing runs the work here (no worker consumes it): what is counted is what the rows hold."""
from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import (
    agent_factory, dataset_factory, judge_factory, member_factory, project_factory, scenario_set_factory,
)
from webapp.models import ProjectServer, Role, TrySession
from webapp.models.datasets import Distillation
from webapp.services.secrets import secret_encrypt

pytestmark = pytest.mark.django_db

MODEL = "tiny-2048"  # the deployment catalogue's tiny model: always there


def _ask(client, project, agent):
    return client.post(reverse("try-page", args=[project.pk]), {
        "agent": agent.pk, "include_base": "on", "system_prompt": "Answer briefly.", "message": "Refund policy?"})


def _own_project(owner):
    project = project_factory(owner=owner)
    return project, agent_factory(project=project, base_model=MODEL)


def test_an_account_cannot_hold_more_try_sessions_than_its_cap_across_its_own_projects(client, settings):
    settings.STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT = 2
    settings.STUDIO_MAX_SERVERS_PER_ACCOUNT = settings.STUDIO_MAX_SERVERS_PER_PROJECT = 10
    first, first_agent = _own_project(None)
    owner = first.owner
    client.force_login(owner)
    assert _ask(client, first, first_agent).status_code == 302
    second, second_agent = _own_project(owner)
    assert _ask(client, second, second_agent).status_code == 302
    third, third_agent = _own_project(owner)  # a fresh project does not reset the count

    refused = _ask(client, third, third_agent)

    assert refused.status_code == 429
    page = refused.content.decode()
    assert "STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT" in page and "has 2 of 2" in page
    held = list(TrySession.objects.filter(created_by=owner).order_by("id"))
    assert len(held) == 2 and not TrySession.objects.filter(project=third).exists()
    assert reverse("try-end", args=[held[0].pk]) in page  # the session to end, with a way to end it
    assert not ProjectServer.objects.filter(project=third).exists()  # nothing started for the refused request

    ended = client.post(reverse("try-end", args=[held[0].pk]))
    assert ended.status_code == 302
    held[0].refresh_from_db()
    assert held[0].status == "failed" and held[0].error.startswith("ended by ")
    assert _ask(client, third, third_agent).status_code == 302


def test_a_project_cap_binds_an_editor_and_a_stranger_cannot_end_the_projects_sessions(client, settings):
    settings.STUDIO_MAX_TRY_SESSIONS_PER_PROJECT = 1
    project, agent = _own_project(None)
    client.force_login(project.owner)
    assert _ask(client, project, agent).status_code == 302
    editor = member_factory(project=project, role=Role.EDITOR)
    client.force_login(editor)

    refused = _ask(client, project, agent)

    assert refused.status_code == 429 and "STUDIO_MAX_TRY_SESSIONS_PER_PROJECT" in refused.content.decode()
    session = TrySession.objects.get(project=project)
    stranger = project_factory().owner  # an ordinary account with its own project
    client.force_login(stranger)
    assert client.post(reverse("try-end", args=[session.pk])).status_code == 404
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(viewer)
    assert client.post(reverse("try-end", args=[session.pk])).status_code == 403
    session.refresh_from_db()
    assert session.status == "queued"


def test_an_account_cannot_start_more_inference_servers_than_its_cap(client, settings):
    settings.STUDIO_MAX_SERVERS_PER_ACCOUNT = 2
    settings.STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT = settings.STUDIO_MAX_TRY_SESSIONS_PER_PROJECT = 10
    first, first_agent = _own_project(None)
    owner = first.owner
    client.force_login(owner)
    projects = [(first, first_agent), _own_project(owner)]
    for project, agent in projects:
        assert _ask(client, project, agent).status_code == 302
    assert _ask(client, *projects[0]).status_code == 302  # a server that is up is reused, never counted twice
    third, third_agent = _own_project(owner)

    refused = _ask(client, third, third_agent)

    page = refused.content.decode()
    assert refused.status_code == 429 and "STUDIO_MAX_SERVERS_PER_ACCOUNT" in page and "has 2 of 2" in page
    assert ProjectServer.objects.filter(project__owner=owner, status="starting").count() == 2
    held = ProjectServer.objects.get(project=first)
    assert reverse("try-server-stop", args=[first.pk]) in page and f'name="server" value="{held.pk}"' in page
    stranger = project_factory().owner  # another account cannot stop it through its own project's page
    client.force_login(stranger)
    own = stranger.owned_projects.get()
    assert client.post(reverse("try-server-stop", args=[own.pk]), {"server": held.pk}).status_code == 302
    assert client.post(reverse("try-server-stop", args=[first.pk]), {"server": held.pk}).status_code == 404
    assert ProjectServer.objects.get(pk=held.pk).status == "starting"
    client.force_login(owner)
    assert client.post(reverse("try-server-stop", args=[first.pk]), {"server": held.pk}).status_code == 302
    assert ProjectServer.objects.get(pk=held.pk).status == "stopped"
    assert _ask(client, third, third_agent).status_code == 302


def _api(user) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return api


def _distillation_body(project):
    scenario_set = scenario_set_factory(project=project)
    judge = judge_factory(project=project, name="judge", model="openai/judge", api_base="https://judge.example/v1",
                          api_key_encrypted=secret_encrypt(plaintext="test"))
    agent = agent_factory(project=project, base_model=MODEL)
    return {"project": project.id, "dataset": dataset_factory(project=project, rows=1).id, "agent": agent.id,
            "scenario_set": scenario_set.id, "judge_config": judge.id, "teacher": judge.id,
            "answers_per_scenario": 2, "threshold": 0.5, "max_scenarios": 2}


def test_an_account_cannot_keep_more_distillations_in_flight_than_its_cap(settings):
    settings.STUDIO_EXECUTOR = "celery"  # queued, and nothing consumes the queue here
    settings.STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT = 1
    project = project_factory()
    api = _api(project.owner)
    first = api.post("/api/distillations/", _distillation_body(project), format="json")
    assert first.status_code == 201, first.content
    other = project_factory(owner=project.owner)

    second = _distillation_body(other)

    refused = api.post("/api/distillations/", second, format="json")

    assert refused.status_code == 429 and refused["Content-Type"] == "application/json"
    body = refused.json()
    assert body["cap"] == "STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT" and body["usage"] == 1 and body["limit"] == 1
    assert body["holders"] == [{"kind": "distillation", "id": first.json()["id"],
                                "label": f"distillation #{first.json()['id']}"}]
    assert Distillation.objects.count() == 1
    assert api.post(f"/api/distillations/{first.json()['id']}/cancel/").status_code == 200
    assert api.post("/api/distillations/", second, format="json").status_code == 201
