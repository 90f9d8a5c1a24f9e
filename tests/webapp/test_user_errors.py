"""Errors on pages are written for the people using them: what happened and what to do, in the page's words, with
the engine's, judge's and litellm's own text folded under "Technical details". Launch refuses what would fail at
the first step: a chat agent with no judge, a judge that does not answer."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils.html import escape
from rest_framework.test import APIClient

from tests.webapp.factories import agent_factory, judge_factory, project_factory, run_factory, scenario_set_factory
from tests.ports import closed_port
from webapp.models import Run, RunStatus

pytestmark = pytest.mark.django_db

JUDGE_DOWN = ("TrainingError: 2 of 2 groups could not be scored in step 1; first error: JudgeError: judge "
              "openai/judge: InternalServerError persisted after 2 retries (litellm.InternalServerError: "
              "InternalServerError: OpenAIException - Internal Server Error); the judge API is down or "
              "rate-limiting: retry later or lower the concurrency")
NO_JUDGE = ("TrainingError: 2 of 2 groups could not be scored in step 1; first error: ValueError: trajectory of "
            "scenario 's1' has no env reward; this environment needs a judge (add a `judge` section to the run "
            "config)")


def _outside_details(html: str) -> str:
    return re.sub(r"<details.*?</details>", "", html, flags=re.S)


def _form(project, agent, **extra):
    return {"name": "r", "agent": agent.id, "scenario_set": scenario_set_factory(project=project).id, "steps": 2,
            "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "seed": 0, **extra}


def _field_errors(html: str, field: str) -> str:
    found = re.search(rf'<div class="field-errors" id="err-{field}"[^>]*>(.*?)</div>', html, re.S)
    assert found, f"no error container for {field}"
    return found.group(1)


@pytest.mark.parametrize("error, says, todo", [
    (JUDGE_DOWN, "The judge&#x27;s server answered with an error of its own", "Test judge"),
    (NO_JUDGE, "This agent&#x27;s answers have no reward of their own, and the run has no judge",
     "Launch the run again with a judge"),
])
def test_a_failed_run_says_what_happened_and_what_to_do_and_folds_the_engines_text(client, error, says, todo):
    run = run_factory(status=RunStatus.FAILED, error=error)
    client.force_login(run.project.owner)
    html = client.get(f"/runs/{run.id}/").content.decode()
    assert re.search(rf'id="run-error">{says}', html)
    assert todo in re.search(r'id="run-error-todo">(.*?)</p>', html, re.S).group(1)
    shown = _outside_details(html)
    for developer_text in ("TrainingError", "litellm", "OpenAIException", "ValueError", "`judge` section"):
        assert developer_text not in shown
    details = html.split('id="run-error-details"')[1].split("</details>")[0]
    assert "Technical details" in details and escape(error) in details


def test_a_scenario_draft_the_judge_cannot_make_says_so_without_pydantics_message(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    scenario_set = scenario_set_factory(project=project, scenarios=0)
    client.force_login(project.owner)
    judge_double.queue({"drafts": "I cannot do that"})  # valid JSON, not the schema
    page = client.post(f"/scenario-sets/{scenario_set.pk}/generate/",
                       {"action": "draft", "task": "shoes", "n": 2, "judge": judge.pk})
    html = page.content.decode()
    assert page.status_code == 400
    assert "did not send back scenarios in the form this page needs" in html
    assert "supports structured (JSON) replies" in html
    assert "validation error for _Reply" in html  # kept for whoever debugs it, folded:
    assert "_Reply" not in _outside_details(html) and "errors.pydantic.dev" not in _outside_details(html)


def test_launch_refuses_a_chat_agent_with_no_judge_beside_the_judge_field(client):
    project = project_factory()
    client.force_login(project.owner)
    response = client.post(reverse("run-launch", args=[project.id]), _form(project, agent_factory(project=project)))
    assert response.status_code == 400
    assert "choose a judge to score them" in _field_errors(response.content.decode(), "judge_config")
    api = APIClient()
    api.force_authenticate(project.owner)
    refused = api.post("/api/runs/", {"project": project.id, "name": "r", "agent": agent_factory(project=project).id,
                                      "scenario_set": scenario_set_factory(project=project).id, "steps": 1},
                       format="json")
    assert refused.status_code == 400 and "choose a judge" in " ".join(refused.json()["judge_config"])
    assert Run.objects.count() == 0


def test_a_chat_agent_that_scores_itself_by_exact_match_launches_without_a_judge(client):
    project = project_factory()
    client.force_login(project.owner)
    agent = agent_factory(project=project, environment_options={"exact_match": True})
    assert client.post(reverse("run-launch", args=[project.id]), _form(project, agent)).status_code == 302
    assert Run.objects.count() == 1


def test_launch_refuses_a_judge_that_does_not_answer_and_queues_nothing(client):
    project = project_factory()
    judge = judge_factory(project=project, api_base=f"http://127.0.0.1:{closed_port()}/v1")
    client.force_login(project.owner)
    response = client.post(reverse("run-launch", args=[project.id]),
                           _form(project, agent_factory(project=project), judge_config=judge.id))
    assert response.status_code == 400
    errors = _field_errors(response.content.decode(), "judge_config")
    assert "The judge did not answer a test request, so the run was not queued." in errors
    assert "could not be reached" in errors and "litellm" not in errors
    assert Run.objects.count() == 0


def test_launch_tests_a_judge_once_and_trusts_a_recent_answer(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    judge_double.queue({"scores": [{"trajectory_id": "1", "explanation": "right", "score": 1.0},
                                   {"trajectory_id": "2", "explanation": "wrong", "score": 0.0}]})
    client.force_login(project.owner)
    agent = agent_factory(project=project)
    first = client.post(reverse("run-launch", args=[project.id]), _form(project, agent, judge_config=judge.id))
    assert first.status_code == 302 and len(judge_double.requests) == 1
    again = client.post(reverse("run-launch", args=[project.id]),
                        _form(project, agent, judge_config=judge.id, name="r2"))
    assert again.status_code == 302 and len(judge_double.requests) == 1  # answered minutes ago: not asked again
    assert Run.objects.count() == 2


def test_an_engine_sentence_loses_only_its_class_name_and_an_unknown_trace_is_folded_whole():
    from webapp.user_errors import user_error

    checkpoint = user_error("TrainingError: init_checkpoint /x holds no adapter (adapter_model.safetensors)")
    assert checkpoint.what == "init_checkpoint /x holds no adapter (adapter_model.safetensors)"
    assert "TrainingError" in checkpoint.details
    unknown = user_error("KeyError: 'reward_mean'")
    assert unknown.what == "Something failed that this page cannot explain."
    assert unknown.details == "KeyError: 'reward_mean'"
    assert user_error("the engine sent no heartbeat for 120 s").details == ""  # already for people: nothing folded


@pytest.mark.parametrize("raw, what, todo", [
    ("TrainingError: McpServerExited: the MCP server 'python' exited with code 3 before it answered the handshake; "
     "its last stderr line: fault server: refusing to start",
     "exited before it answered", "last stderr line usually says why"),
    ("McpNotMcp: the URL 'http://h/' is not an MCP endpoint: it answered 404 Not Found (text/html)",
     "answers, but not as an MCP server", "path ending in /mcp"),
    ("McpStartTimeout: the MCP server 'python' timed out: no handshake and tool listing within 20 s",
     "timed out", "longer per-call timeout"),
    ("McpProgramNotMcp: the program 'python' is not an MCP server: it wrote 'Serving on port 8000' to its standard "
     "output, where an MCP server writes only JSON-RPC messages",
     "is not an MCP server", "must start an MCP server over stdio"),
    ("McpServerDidNotStart: the MCP server 'http://h/mcp' refused the request: it answered 401 Unauthorized",
     "wants credentials", "Enter the header it expects"),
    ("McpServerDidNotStart: the MCP server 'http://127.0.0.1:9/mcp' did not start: ConnectError: refused",
     "could not be reached or did not start", "is the server running"),
    ("McpInvalidUtf8: the server wrote bytes that are not UTF-8 to its standard output (b'\\xff')",
     "not UTF-8 text", "log to standard error"),
    ("McpToolsTooLarge: the server lists 3000 tools, more than the 128 an agent may be given",
     "more tools, or larger ones", "Serve fewer tools"),
])
def test_each_mcp_failure_names_its_cause_with_advice_that_fits_it(raw, what, todo):
    from webapp.user_errors import user_error

    explained = user_error(raw)
    assert what in explained.what and todo in explained.todo and explained.details == raw
    assert "a failed run resumes" not in explained.todo
