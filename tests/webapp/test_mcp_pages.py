"""The MCP server's tools feed the scenario generator (drafts that need them, reviewed before use), and tool
calls read as blocks on the trajectory, group and compare pages: name, arguments, the matching result or error,
long parts collapsed, everything escaped."""
from __future__ import annotations

import pytest

from tests.webapp.factories import judge_factory, mcp_server_factory, project_factory, run_factory, \
    scenario_set_factory
from webapp.live.ingest import run_event_ingest
from webapp.models import Scenario, Trajectory

pytestmark = pytest.mark.django_db

TOOLS = [{"type": "function", "function": {
    "name": "search_inbox", "description": "Search the mailbox <b>by keywords</b>.",
    "parameters": {"type": "object", "properties": {"keywords": {"type": "array", "items": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "read_email", "description": "Read one email by id.",
                                      "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]
DRAFTS = {"scenarios": [
    {"user_message": "When is the Q3 budget review?", "reference": "October 14", "difficulty": "medium"},
    {"user_message": "Who sent the offsite agenda?", "reference": None, "difficulty": "easy"}]}


def test_drafts_from_a_server_need_its_tools_and_are_stored_only_when_accepted(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    server = mcp_server_factory(project=project, name="mailbox", tools=TOOLS)
    scenario_set = scenario_set_factory(project=project, scenarios=0)
    judge_double.queue(DRAFTS)
    client.force_login(project.owner)
    url = f"/scenario-sets/{scenario_set.pk}/generate/"
    page = client.post(url, {"action": "draft", "task": "Answer questions about my email", "n": 2,
                             "judge": judge.pk, "mcp_server": server.pk}).content.decode()
    prompt = judge_double.requests[0].prompt_text
    assert "<tools>" in prompt and "search_inbox" in prompt and "read_email" in prompt and '"keywords"' in prompt
    assert "only do by calling at least one of these tools" in prompt
    assert "Drafted to need the tools of mailbox: search_inbox, read_email." in page
    assert scenario_set.scenarios.count() == 0

    client.post(url, {"action": "accept", "task": "Answer questions about my email", "mcp_server_name": "mailbox",
                      "user_message-0": "When is the Q3 budget review?", "reference-0": "October 14",
                      "difficulty-0": "medium", "split-0": "train", "keep-0": "on",
                      "user_message-1": "Who sent the offsite agenda?", "reference-1": "", "difficulty-1": "easy",
                      "split-1": "validation", "keep-1": "on"})
    stored = {s.user_message: s for s in scenario_set.scenarios.all()}
    assert stored["Who sent the offsite agenda?"].split == Scenario.Split.VALIDATION
    assert stored["When is the Q3 budget review?"].metadata["mcp_server"] == "mailbox"


def test_a_server_whose_tools_were_never_listed_cannot_feed_the_generator(client, judge_double, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "secret")
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base, api_key_env="JUDGE_DOUBLE_API_KEY")
    server = mcp_server_factory(project=project, name="unlisted")
    scenario_set = scenario_set_factory(project=project, scenarios=0)
    client.force_login(project.owner)
    response = client.post(f"/scenario-sets/{scenario_set.pk}/generate/", {
        "action": "draft", "task": "mail", "n": 2, "judge": judge.pk, "mcp_server": server.pk})
    assert response.status_code == 400 and "use Test connection on its page first" in response.content.decode()
    assert judge_double.requests == []


LONG_RESULT = "line\n" * 40
TOOL_RUN_MESSAGES = [
    {"role": "user", "content": "When is the budget review?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "search_inbox",
                                                          "arguments": '{"keywords": ["budget", "<img src=x>"]}'}},
        {"id": "call_2", "type": "function", "function": {"name": "read_email", "arguments": '{"id": "m-9"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '[{"id": "m-7", "subject": "<script>x</script>"}]'},
    {"role": "tool", "tool_call_id": "call_2", "content": "error: no email with id m-9"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_3", "type": "function", "function": {"name": "read_email", "arguments": '{"id": "m-7"}'}}]},
    {"role": "tool", "tool_call_id": "call_3", "content": LONG_RESULT},
    {"role": "assistant", "content": "October 14."},
]


def _tool_run():
    project = project_factory()
    run = run_factory(project=project, status="running")
    record = {"scenario_id": "s1", "messages": TOOL_RUN_MESSAGES, "reward": 0.7, "judge_score": 0.7,
              "explanation": "ok", "criteria": {}, "metadata": {}}
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
                                           "trajectories": [record, {**record, "reward": 0.1}],
                                           "reward_mean": 0.4, "reward_std": 0.3})
    return project, run, Trajectory.objects.filter(group__run=run).order_by("index").first()


def _blocks(page: str) -> list[str]:
    return page.split('class="tool-call')[1:]


@pytest.mark.parametrize("which", ["trajectory", "group", "compare"])
def test_tool_calls_read_as_blocks_with_their_results_escaped_and_long_ones_collapsed(client, which):
    project, run, trajectory = _tool_run()
    client.force_login(project.owner)
    url = {"trajectory": f"/trajectories/{trajectory.pk}/", "group": f"/groups/{trajectory.group_id}/",
           "compare": f"/runs/{run.pk}/compare/?t={trajectory.pk}"}[which]
    page = client.get(url).content.decode()
    assert "<script>x</script>" not in page and "<img src=x>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "&lt;img src=x&gt;" in page
    blocks = _blocks(page)
    first = next(b for b in blocks if "call_1" in b)
    assert "search_inbox" in first and "&quot;keywords&quot;: [" in first  # pretty JSON, indented
    assert "m-7" in first and "result" in first  # the tool message answering call_1, beside the call
    failed = next(b for b in blocks if "call_2" in b)
    assert failed.startswith(" tool-error") and "error: no email with id m-9" in failed
    long = next(b for b in blocks if "call_3" in b)
    assert '<details class="tool-result"><summary>result (200 characters)</summary>' in long
    if which != "trajectory":  # the group and compare pages show the calls outside the folded conversation
        assert "Tool calls (3)" in page


def test_a_tool_message_is_shown_once_beside_its_call_not_again_on_its_own(client):
    project, run, trajectory = _tool_run()
    client.force_login(project.owner)
    page = client.get(f"/trajectories/{trajectory.pk}/").content.decode()
    assert page.count("error: no email with id m-9") == 1
    assert "result of call call_2" not in page
