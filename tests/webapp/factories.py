"""Factories for the web app's models: each builds a valid object with overridable fields."""
from __future__ import annotations

import itertools
from typing import Any

from django.contrib.auth import get_user_model

from webapp.models import (
    Agent, Dataset, DatasetRow, DatasetVersion, JudgeConfig, McpServer, Membership, Project, Role, Rubric,
    RubricVersion, Run, Scenario, ScenarioSet,
)
from webapp.model_catalogue import TINY_MODEL, ModelEntry
from webapp.services.run_config import run_config_build

TEST_TINY_MODEL = "test-tiny"  # the tiny model the tests build, in the tests' catalogue (tests/webapp/settings.py)

_n = itertools.count(1)
PASSWORD = "correct-horse-battery"


def user_factory(**fields: Any):
    n = next(_n)
    fields.setdefault("username", f"user{n}")
    return get_user_model().objects.create_user(password=PASSWORD, **fields)


def project_factory(*, owner=None, **fields: Any) -> Project:
    owner = owner or user_factory()
    project = Project.objects.create(owner=owner, name=fields.pop("name", f"project {next(_n)}"), **fields)
    Membership.objects.create(project=project, user=owner, role=Role.EDITOR)
    return project


def member_factory(*, project: Project, role: str = Role.VIEWER, user=None):
    user = user or user_factory()
    Membership.objects.create(project=project, user=user, role=role)
    return user


def catalogue_model(settings, source: Any, *, name: str | None = None, context_length: int = 1024) -> str:
    """Lists `source` (a directory or an id) in this test's deployment catalogue, as an administrator would, and
    returns the name agents choose it by. `settings` is pytest-django's fixture, which restores the list after."""
    name = name or f"model-{next(_n)}"
    settings.STUDIO_BASE_MODELS = {**settings.STUDIO_BASE_MODELS, name: ModelEntry(
        source=str(source), context_length=context_length, description=f"test model {name}")}
    return name


def agent_factory(*, project: Project, **fields: Any) -> Agent:
    fields.setdefault("name", f"agent {next(_n)}")
    fields.setdefault("base_model", TINY_MODEL)  # the shipped catalogue's entry (tests with an engine name test-tiny)
    fields.setdefault("system_prompt", "Answer briefly.")
    return Agent.objects.create(project=project, **fields)


def scenario_set_factory(*, project: Project, scenarios: int = 3, **fields: Any) -> ScenarioSet:
    fields.setdefault("name", f"scenarios {next(_n)}")
    scenario_set = ScenarioSet.objects.create(project=project, **fields)
    for i in range(scenarios):
        Scenario.objects.create(scenario_set=scenario_set, external_id=f"s{i + 1}", user_message=f"Question {i + 1}?")
    return scenario_set


def conversation_rows(count: int) -> list[dict]:
    """Valid SFT conversations (OpenAI chat format), one tool call among them."""
    rows = [{"messages": [{"role": "user", "content": f"Question {i + 1}?"},
                          {"role": "assistant", "content": f"Answer {i + 1}."}]} for i in range(count)]
    if count:
        rows[0] = {"messages": [
            {"role": "user", "content": "What is a fjord?"},
            {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "lookup", "arguments": "{\"q\": \"fjord\"}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "a long narrow inlet"},
            {"role": "assistant", "content": "A long narrow inlet."}],
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]}
    return rows


def dataset_factory(*, project: Project, rows: int = 3, **fields: Any) -> Dataset:
    """A dataset with one version of `rows` valid conversations."""
    fields.setdefault("name", f"dataset {next(_n)}")
    dataset = Dataset.objects.create(project=project, **fields)
    if rows:
        version = DatasetVersion.objects.create(dataset=dataset, number=1, source=DatasetVersion.Source.UPLOAD,
                                                note="factory", row_count=rows)
        DatasetRow.objects.bulk_create(DatasetRow(version=version, index=i, messages=r["messages"],
                                                  tools=r.get("tools"), metadata={})
                                       for i, r in enumerate(conversation_rows(rows)))
    return dataset


def rubric_factory(*, project: Project, text: str = "Prefer concise, correct answers.", criteria=None) -> Rubric:
    rubric = Rubric.objects.create(project=project, name=f"rubric {next(_n)}")
    RubricVersion.objects.create(rubric=rubric, number=1, text=text, criteria=criteria or [])
    return rubric


def judge_factory(*, project: Project, **fields: Any) -> JudgeConfig:
    fields.setdefault("name", f"judge {next(_n)}")
    fields.setdefault("model", "openai/judge")
    return JudgeConfig.objects.create(project=project, **fields)


def mcp_server_factory(*, project: Project, **fields: Any) -> McpServer:
    """An HTTP server by default (nothing is started); transport="stdio" names the catalogue's mailbox unless
    catalogue_entry says otherwise."""
    fields.setdefault("name", f"mcp {next(_n)}")
    if fields.get("transport") == "stdio":
        fields.setdefault("catalogue_entry", "mailbox")
    else:
        fields.setdefault("url", "http://127.0.0.1:9/mcp")
    return McpServer.objects.create(project=project, **fields)


def run_factory(*, project: Project | None = None, status: str = "queued", steps: int = 2,
                overrides: dict | None = None, **fields: Any) -> Run:
    """A run row with a config the engine accepts (nothing is enqueued)."""
    project = project or project_factory()
    agent = fields.pop("agent", None) or agent_factory(project=project)
    scenario_set = fields.pop("scenario_set", None) or scenario_set_factory(project=project)
    judge = fields.pop("judge_config", None)
    rubric_version = fields.pop("rubric_version", None)
    config = run_config_build(name=fields.pop("name", "test-run"), agent=agent, scenario_set=scenario_set,
                              rubric_version=rubric_version, judge=judge, steps=steps, group_size=2,
                              groups_per_step=2, learning_rate=1e-3, overrides=overrides)
    return Run.objects.create(project=project, name=config["name"], agent=agent, scenario_set=scenario_set,
                              judge_config=judge, rubric_version=rubric_version, config=config, status=status,
                              total_steps=steps, **fields)
