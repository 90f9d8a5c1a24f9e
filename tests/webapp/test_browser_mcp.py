"""The MCP path in a real browser (Debian chromium via Playwright, headless): the owner adds the example mailbox
server (stdio, the deployment's catalogue entry, no administrator needed), tests the connection (run by a worker,
answered through the page's polling) and sees its tools, drafts tasks that need them with the judge double and
accepts them; the group page of a run whose trajectories called tools shows the calls as blocks. Screenshots go
to var/screenshots/."""
from __future__ import annotations

import pytest

from tests.judge_double import JudgeDouble
from tests.webapp.factories import project_factory, run_factory, scenario_set_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in, outside_the_loop
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_mcp_pages import TOOL_RUN_MESSAGES
from webapp.live.ingest import run_event_ingest
from webapp.models import McpServer, Scenario, TrajectoryGroup
from webapp.services.catalogue import judge_config_create

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

DRAFTS = {"scenarios": [
    {"user_message": "When is the quarterly budget review, according to Dana's email?", "reference": None,
     "difficulty": "medium"},
    {"user_message": "Which vendor sent the <b>renewal</b> quote last week?", "reference": None, "difficulty": "hard"},
    {"user_message": "Find the email about the office move and tell me the new address.", "reference": None,
     "difficulty": "easy"}]}


def test_the_owner_adds_the_mailbox_lists_its_tools_generates_tasks_and_reads_tool_calls(server):  # noqa: F811
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Mail project")
    owner = project.owner
    scenario_set = scenario_set_factory(project=project, name="mail tasks", scenarios=0)
    with JudgeDouble([DRAFTS]) as judge, launch_chromium() as browser:
        judge_config_create(user=owner, project=project, name="double", model=judge.model, api_base=judge.api_base,
                            api_key="test")
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, owner.username)

        page.goto(f"{server}/projects/{project.id}/")
        page.click("#mcp-server-new")
        page.fill("#id_name", "mailbox")
        page.select_option("#id_transport", "stdio")
        assert page.locator("#id_command").count() == 0  # no command is typed: the deployment's catalogue has it
        page.select_option("#id_catalogue_entry", "mailbox")
        page.screenshot(path=str(SHOTS / "mcp-0-form.png"), full_page=True)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("MCP server mailbox")
        expect(page.locator("#mcp-no-tools")).to_be_visible()
        page.click("#mcp-test")  # queued for a worker; the page polls until the result is there
        expect(page.locator("#mcp-test-outcome")).to_contain_text("3 tools listed", timeout=60_000)
        expect(page.locator("#mcp-test-outcome")).to_have_attribute("data-ok", "1")
        names = page.locator("#mcp-tool-table .mcp-tool strong").all_inner_texts()
        assert names == ["search_inbox", "read_email", "answer"]
        page.locator("#mcp-tool-table details").first.click()  # the input schema, unfolded
        page.screenshot(path=str(SHOTS / "mcp-1-tools.png"), full_page=True)
        server_row = McpServer.objects.get(project=project, name="mailbox")
        assert len(server_row.tools) == 3

        page.goto(f"{server}/scenario-sets/{scenario_set.id}/generate/")
        page.fill("#task", "Answer questions about the user's mailbox")
        page.fill("#n", "3")
        page.select_option("#mcp_server", label="mailbox (3 tools listed)")
        page.click("#draft-form button")
        expect(page.locator("#drafts-tools")).to_contain_text("search_inbox, read_email, answer")
        expect(page.locator("#drafts tbody tr")).to_have_count(3)
        assert "search_inbox" in judge.requests[0].prompt_text
        page.select_option("select[name=split-2]", "validation")
        page.screenshot(path=str(SHOTS / "mcp-2-drafts.png"), full_page=True)
        page.click("#accept")
        expect(page.locator("body")).to_contain_text("added 3 generated scenarios")
        stored = Scenario.objects.filter(scenario_set=scenario_set)
        assert stored.count() == 3 and stored.filter(split="validation").count() == 1
        assert all(s.metadata["mcp_server"] == "mailbox" for s in stored)

        run = run_factory(project=project, status="running", name="mail-run")
        record = {"scenario_id": "s1", "messages": TOOL_RUN_MESSAGES, "reward": 0.7, "judge_score": 0.7,
                  "explanation": "searched, then read the right email", "criteria": {}, "metadata": {}}
        outside_the_loop(run_event_ingest, run_id=run.id, event={
            "kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
            "trajectories": [record, {**record, "reward": 0.2, "judge_score": 0.2}],
            "reward_mean": 0.45, "reward_std": 0.25})
        group = TrajectoryGroup.objects.get(run=run)
        page.goto(f"{server}/groups/{group.id}/")
        column = page.locator(".column").first
        expect(column.locator(".tool-calls .tool-call")).to_have_count(3)
        expect(column.locator(".tool-calls .tool-call").first).to_contain_text("search_inbox")
        expect(column.locator(".tool-calls .tool-error")).to_contain_text("error: no email with id m-9")
        expect(column.locator(".tool-calls details.tool-result")).to_have_count(1)  # the long result, folded
        assert "<script>x</script>" not in page.content()  # the server's text, escaped
        page.screenshot(path=str(SHOTS / "mcp-3-group-tool-calls.png"), full_page=True)
        browser.close()
