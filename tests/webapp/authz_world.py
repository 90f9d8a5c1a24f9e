"""The world the authorisation matrix runs in: one project with a member of every role, another project with
its own admin, and one object of every kind the URLs name. `url_kwargs` fills any URL of the app."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.test import Client
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.ports import closed_port
from tests.webapp.factories import (
    dataset_factory, agent_factory, judge_factory, mcp_server_factory, member_factory, project_factory, rubric_factory, run_factory,
    scenario_set_factory, user_factory,
)
from webapp.live.ingest import run_event_ingest
from webapp.models import (Checkpoint, Distillation, DistillationDraft, ModelExport, Rescore, Role, RunStatus,
                           Scenario, Trajectory, TrySession)
from webapp.notifications.services import webhook_create
from webapp.services.project_tokens import project_token_create

# Lowest first. "admin" is the project's owner; "other_admin" owns another project; "anonymous" is logged out.
ROLES = ("anonymous", "other_admin", "viewer", "reviewer", "editor", "admin")
MEMBER_RANK = {"viewer": 1, "reviewer": 2, "editor": 3, "admin": 3}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@dataclass
class World:
    users: dict[str, Any]
    ids: dict[str, Any]

    def url_kwargs(self, names: list[str]) -> dict[str, Any]:
        return {name: self.ids[name] for name in names}

    def client(self, role: str, api: bool):
        user = self.users.get(role)
        if api:
            client = APIClient()
            if user is not None:
                client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
            return client
        client = Client()
        if user is not None:
            client.force_login(user)
        return client


def build_world(tmp_path: Path, judge_api_base: str | None = None) -> World:
    project = project_factory()
    users = {"anonymous": None, "admin": project.owner,
             "other_admin": project_factory().owner}
    for role in ("viewer", "reviewer", "editor"):
        users[role] = member_factory(project=project, role=getattr(Role, role.upper()), user=user_factory())
    # The judge's calls (test-judge, judge check) never leave this machine: its endpoint is `judge_api_base`, else a
    # closed local port (refused; the judge check retries that with backoff, some seconds a call).
    judge = judge_factory(project=project, api_base=judge_api_base or f"http://127.0.0.1:{closed_port()}/v1")
    rubric = rubric_factory(project=project)
    agent = agent_factory(project=project)
    scenario_set = scenario_set_factory(project=project)
    run = run_factory(project=project, status=RunStatus.AWAITING_REVIEW, agent=agent, scenario_set=scenario_set,
                      judge_config=judge, rubric_version=rubric.latest_version)
    records = [{"scenario_id": "s1", "messages": [{"role": "user", "content": "Question 1?"},
                                                  {"role": "assistant", "content": f"answer {i}"}],
                "reward": r, "judge_score": r, "explanation": "ok", "criteria": {}, "metadata": {}}
               for i, r in enumerate((0.8, 0.2))]
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
                                           "trajectories": records, "reward_mean": 0.5, "reward_std": 0.3})
    trajectory = Trajectory.objects.filter(group__run=run).order_by("index").first()
    scenario = Scenario.objects.filter(scenario_set=scenario_set, external_id="s1").order_by("id").first()
    checkpoint_dir = tmp_path / "checkpoint"
    checkpoint_dir.mkdir()
    (checkpoint_dir / "adapter_config.json").write_text("{}")
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path=str(checkpoint_dir), adapter_name="r@1")
    rescore = Rescore.objects.create(project=project, rubric_text="x", judge_config=judge, judge_model=judge.model,
                                     group_ids=[trajectory.group_id], status=Rescore.Status.DONE)
    token, _ = project_token_create(user=project.owner, project=project, name="world")
    dataset = dataset_factory(project=project, rows=2)
    distillation = Distillation.objects.create(
        project=project, dataset=dataset, agent=agent, scenario_set=scenario_set, teacher=judge, judge_config=judge,
        status=Distillation.Status.DONE, config={"teacher": {"model": judge.model}, "judge": {"judge_model": judge.model}})
    draft = DistillationDraft.objects.create(distillation=distillation, index=0, scenario_external_id="s1",
                                             messages=[{"role": "user", "content": "q"},
                                                       {"role": "assistant", "content": "a"}])
    answered = {"status": "done", "messages": [{"role": "user", "content": "Question 1?"},
                                               {"role": "assistant", "content": "an answer"}], "tools": None,
                "error": "", "seconds": 0.1}
    try_session = TrySession.objects.create(
        project=project, agent=agent, base_model=agent.base_model, user_message="Question 1?", status="done",
        columns=[{"label": "base", "checkpoint_id": None, "model": "base"},
                 {"label": "r@1", "checkpoint_id": checkpoint.id, "model": f"r@1#{checkpoint.id}"}],
        answers=[answered, answered])
    export = ModelExport.objects.create(checkpoint=checkpoint, status="failed", error="world")
    mcp_server = mcp_server_factory(project=project, url=f"http://127.0.0.1:{closed_port()}/mcp")
    webhook, _ = webhook_create(user=project.owner, project=project, url=f"http://127.0.0.1:{closed_port()}/hook",
                                fmt="json", events=["failed"])
    ids = {"project_id": project.id, "token_id": token.id, "server_id": mcp_server.id, "agent_id": agent.id,
           "scenario_set_id": scenario_set.id, "dataset_id": dataset.id, "version_id": dataset.latest_version.id,
           "distillation_id": distillation.id, "draft_id": draft.id,
           "rubric_id": rubric.id, "judge_id": judge.id, "run_id": run.id, "group_id": trajectory.group_id,
           "trajectory_id": trajectory.id, "checkpoint_id": checkpoint.id, "rescore_id": rescore.id,
           "session_id": try_session.id, "export_id": export.id, "webhook_id": webhook.id,
           "scenario_id": "s1", "scenario_pk": scenario.id, "action": "pause", "user_id": users["viewer"].id,
           # an invite link for a real account whose token is wrong (or spent): the "link invalid" page
           "uidb64": urlsafe_base64_encode(force_bytes(users["viewer"].pk)), "token": "spent-token"}
    return World(users=users, ids=ids)
