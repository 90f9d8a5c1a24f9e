"""Langfuse as a site's tracker (issue 49): offered when the deployment names its host, chosen by a run like W&B
and MLflow, its host frozen into the run from the settings (never from a person), and its keys passed from the
worker's environment to the engine of a run that reports to Langfuse only. What the engine sends:
tests/training/test_langfuse_traces.py."""
from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import agent_factory, member_factory, project_factory, run_factory, scenario_set_factory
from webapp.execution.runner import engine_env
from webapp.models import Role, Run

pytestmark = pytest.mark.django_db


def test_a_run_that_chooses_langfuse_reports_to_the_sites_host_and_only_it_gets_the_keys(settings, monkeypatch):
    settings.STUDIO_LANGFUSE_HOST, settings.STUDIO_LANGFUSE_ENVIRONMENT = "https://langfuse.example", "studio"
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-site")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-site")
    project = project_factory()
    editor = member_factory(project=project, role=Role.EDITOR)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=editor)[0].key}")
    body = {"project": project.id, "name": "traced", "scenario_set": scenario_set_factory(project=project).id,
            "agent": agent_factory(project=project, environment_kind="game_2048").id, "trackers": ["langfuse"]}
    # where it reports is the site's: a host given in the overrides is refused, and nothing is launched
    placed = client.post("/api/runs/", {**body, "overrides": {"trackers": {"langfuse": {
        "host": "http://169.254.169.254"}}}}, format="json")
    assert placed.status_code == 400 and not Run.objects.exists()

    launched = client.post("/api/runs/", body, format="json")
    assert launched.status_code == 201, launched.json()
    run = Run.objects.get(name="traced")
    assert run.config["trackers"]["langfuse"] == {"host": "https://langfuse.example", "environment": "studio"}
    env = engine_env(run)
    assert (env["LANGFUSE_PUBLIC_KEY"], env["LANGFUSE_SECRET_KEY"]) == ("pk-lf-site", "sk-lf-site")
    assert "LANGFUSE_SECRET_KEY" not in engine_env(run_factory(project=project))


def test_langfuse_is_not_offered_where_the_site_names_no_host(settings):
    settings.STUDIO_LANGFUSE_HOST = None
    project = project_factory()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=project.owner)[0].key}")
    refused = client.post("/api/runs/", {
        "project": project.id, "name": "r", "agent": agent_factory(project=project).id,
        "scenario_set": scenario_set_factory(project=project).id, "trackers": ["langfuse"]}, format="json")
    assert refused.status_code == 400 and "does not offer langfuse" in str(refused.json()["trackers"])
