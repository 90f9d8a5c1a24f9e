"""The attacker's world for the run-settings tests (tests/security/test_overrides_*.py): an ordinary account that
signs up, creates its own project through the API and launches runs in it; a victim's project next door with a
trained run and a checkpoint on disk. Helpers send a launch through the API and through the launch form."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import agent_factory, project_factory, run_factory, scenario_set_factory, user_factory
from webapp.models import Checkpoint, Project, Run, RunStatus


def api_as(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def page_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@dataclass
class Attacker:
    user: Any
    project: Project
    agent_id: int
    scenario_set_id: int

    def api_launch(self, overrides: Any, **fields: Any):
        body = {"project": self.project.id, "name": fields.pop("name", "mine"), "agent": self.agent_id,
                "scenario_set": self.scenario_set_id, "steps": 1, "group_size": 2, "groups_per_step": 1,
                "learning_rate": 1e-4, "overrides": overrides, **fields}
        return api_as(self.user).post("/api/runs/", body, format="json")

    def form_launch(self, overrides: Any, **fields: Any):
        headers = {k: fields.pop(k) for k in list(fields) if k.startswith("HTTP_")}
        form = {"name": fields.pop("name", "mine"), "agent": self.agent_id, "scenario_set": self.scenario_set_id,
                "steps": 1, "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0,
                "overrides": overrides if isinstance(overrides, str) else json.dumps(overrides), **fields}
        return page_as(self.user).post(reverse("run-launch", args=[self.project.id]), form, **headers)


def attacker_signs_up() -> Attacker:
    """An ordinary account (no staff, no membership anywhere) creates its own project, as anyone may."""
    user = user_factory()
    created = api_as(user).post("/api/projects/", {"name": "my own project"}, format="json")
    assert created.status_code == 201, created.content
    project = Project.objects.get(pk=created.json()["id"])
    assert project.owner == user
    return Attacker(user=user, project=project, agent_id=scoring_agent(project).id,
                    scenario_set_id=scenario_set_factory(project=project).id)


def scoring_agent(project: Project):
    """A chat agent that scores its own answers (exact match), so its runs need no judge."""
    return agent_factory(project=project, environment_options={"exact_match": True})


@dataclass
class Victim:
    project: Project
    run: Run
    checkpoint: Checkpoint
    adapter_dir: Path


def victim_with_a_checkpoint(owner=None) -> Victim:
    """Someone's project (`owner`'s, else a new account's): a completed run and its step-1 adapter on the
    worker's disk."""
    project = project_factory(owner=owner)
    run = run_factory(project=project, status=RunStatus.COMPLETED, agent=scoring_agent(project))
    adapter_dir = Path(run.output_dir) / "checkpoints" / "step_0001"
    adapter_dir.mkdir(parents=True)
    (adapter_dir / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    (adapter_dir / "adapter_model.safetensors").write_bytes(b"victim's weights")
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path=str(adapter_dir), adapter_name="victim@1")
    return Victim(project=project, run=run, checkpoint=checkpoint, adapter_dir=adapter_dir)


@dataclass
class FakeMetadataService:
    """A stand-in for a cloud metadata endpoint on a private address: records every request it gets."""
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def __enter__(self) -> "FakeMetadataService":
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                seen.append(self.path)
                body = b'{"AccessKeyId": "ASIA-FAKE", "SecretAccessKey": "fake-secret"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/latest/meta-data/iam/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
