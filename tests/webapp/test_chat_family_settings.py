"""The model catalogue names a model's chat family and tool parser; a run freezes them, a person chooses only
whether a reasoning model thinks, and the run page says which."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.factories import agent_factory, project_factory, run_factory
from webapp.model_catalogue import ModelEntry
from webapp.selectors.runs import run_settings

pytestmark = pytest.mark.django_db


def catalogue_qwen3(settings) -> str:
    settings.STUDIO_BASE_MODELS = {**settings.STUDIO_BASE_MODELS, "my-qwen3": ModelEntry(
        source="Qwen/Qwen3-8B", context_length=32768, chat_template="qwen3", tool_parser="hermes")}
    return "my-qwen3"


def chat_row(run) -> str:
    return dict(next(s for s in run_settings(run=run) if s["title"] == "Model")["rows"])["Chat"]


def test_a_run_freezes_the_catalogue_entrys_chat_family_and_tool_parser_with_the_reasoning_chosen(settings):
    project = project_factory()
    agent = agent_factory(project=project, base_model=catalogue_qwen3(settings))
    run = run_factory(project=project, agent=agent, overrides={"chat": {"reasoning": "drop"}})
    assert run.config["chat"] == {"family": "qwen3", "reasoning": "drop"}
    assert run.config["server"]["tool_call_parser"] == "hermes"
    assert chat_row(run) == "qwen3; reasoning drop"


def test_a_person_cannot_choose_the_chat_family_of_a_run(settings):
    project = project_factory()
    agent = agent_factory(project=project, base_model=catalogue_qwen3(settings))
    with pytest.raises(ValidationError, match="model catalogue"):
        run_factory(project=project, agent=agent, overrides={"chat": {"family": "llama3"}})


def test_the_run_page_says_a_tiny_models_family_comes_from_its_template_and_it_keeps_reasoning():
    run = run_factory()
    assert chat_row(run) == "family from the model's template; reasoning keep"


def test_a_catalogue_entry_naming_an_unknown_chat_family_is_refused():
    with pytest.raises(ValueError, match="give a chat family, one of qwen3"):
        ModelEntry(source="org/model", context_length=8, chat_template="{{ messages }}")
