"""Issue 34's judge labels, error causes and prompt budget, in a real browser (headless Debian chromium via
Playwright): the group, trajectory and compare pages read the judge's lists and ranges in the stable labels; Test
judge tells a missing key, a rate limit, a server error and a server that is not there apart, and only a run that
stopped mid-way is told it resumes from its last checkpoint; the agent form warns that a prompt and its answer do
not fit the model's context as soon as the numbers are in, and the launch refuses it in words.
Screenshots go to var/screenshots/."""
from __future__ import annotations


import pytest
from django.utils import timezone

from tests.judge_double import HttpError
from tests.ports import closed_port
from tests.webapp.factories import (
    TEST_TINY_MODEL, judge_factory, mcp_server_factory, project_factory, run_factory, scenario_set_factory,
)
from tests.webapp.judge_words import PEOPLE_READ, UNTRANSLATED, judged_group
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_error_causes import SERVER_DOWN
from tests.webapp.test_prompt_budget_pages import SYSTEM, mail_tools
from webapp.models import Run, RunStatus

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]
RESUMES = "resumes from its last checkpoint"


@pytest.fixture
def no_provider_key(monkeypatch):
    """The web server starts without OPENAI_API_KEY, as a judge with no key of its own would find it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def model_check_at_launch(monkeypatch):
    """The deployment's default: the launch (and the agent form) reads the base model's files."""
    monkeypatch.setenv("STUDIO_MODEL_CHECK", "launch")


def test_the_group_trajectory_and_compare_pages_show_no_untranslated_judge_id(server):  # noqa: F811
    from playwright.sync_api import expect

    run = run_factory(status=RunStatus.COMPLETED)
    trajectories = judged_group(run)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(page, server, run.project.owner.username)

        page.goto(f"{server}/groups/{trajectories[0].group_id}/")
        body = page.locator("main")
        for sentence in PEOPLE_READ:
            expect(body).to_contain_text(sentence)
        assert not UNTRANSLATED.search(body.inner_text()), UNTRANSLATED.search(body.inner_text())
        page.screenshot(path=str(SHOTS / "group-judge-lists-in-labels.png"), full_page=True)

        page.goto(f"{server}/trajectories/{trajectories[1].id}/")
        expect(page.locator("main")).to_contain_text(PEOPLE_READ[1])
        assert not UNTRANSLATED.search(page.locator("main").inner_text())

        ids = "&".join(f"t={t.id}" for t in trajectories)
        page.goto(f"{server}/runs/{run.id}/compare/?{ids}")
        for sentence in PEOPLE_READ:
            expect(page.locator("main")).to_contain_text(sentence)
        assert not UNTRANSLATED.search(page.locator("main").inner_text())
        browser.close()


def test_test_judge_names_each_cause_and_only_a_run_stopped_mid_way_hears_of_checkpoints(
        no_provider_key, judge_double, server):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory()
    judges = {
        "no key": (judge_factory(project=project, name="hosted, no key", model="openai/gpt-4o-mini"),
                   "The judge has no API key", "Store the key on the judge's page"),
        "429": (judge_factory(project=project, name="limited", api_base=judge_double.api_base),
                "The judge's API is rate-limiting", "lower the judge's concurrency"),
        "500": (judge_factory(project=project, name="failing", api_base=judge_double.api_base),
                "The judge's server answered with an error of its own", "try again later"),
        "down": (judge_factory(project=project, name="down", api_base=f"http://127.0.0.1:{closed_port()}/v1"),
                 "The judge's server could not be reached", "Check that the judge's server is up"),
    }
    mid_way = run_factory(project=project, status=RunStatus.FAILED, error=SERVER_DOWN, steps_done=2, name="mid-way")
    at_start = run_factory(project=project, status=RunStatus.FAILED, error=SERVER_DOWN, name="at-start")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        log_in(page, server, project.owner.username)
        seen = set()
        for cause, (judge, says, advice) in judges.items():
            if cause in ("429", "500"):
                judge_double.queue(HttpError(int(cause)))
            page.goto(f"{server}/judges/{judge.pk}/")
            page.click("#test-judge")
            expect(page.locator("#judge-test-error")).to_contain_text(says, timeout=30_000)
            expect(page.locator("#judge-test-error-todo")).to_contain_text(advice)
            expect(page.locator("#judge-test-outcome")).not_to_contain_text(RESUMES)
            seen.add(page.locator("#judge-test-error").inner_text())
            page.screenshot(path=str(SHOTS / f"judge-test-{cause.replace(' ', '-')}.png"), full_page=True)
        assert len(seen) == len(judges)  # four causes, four different sentences

        page.goto(f"{server}/runs/{mid_way.pk}/")
        expect(page.locator("#run-error")).to_contain_text("The judge's server could not be reached")
        expect(page.locator("#run-error-todo")).to_contain_text(RESUMES)
        page.goto(f"{server}/runs/{at_start.pk}/")
        expect(page.locator("#run-error")).to_contain_text("The judge's server could not be reached")
        expect(page.locator("#run-error-todo")).not_to_contain_text(RESUMES)
        browser.close()


def test_the_agent_form_warns_a_prompt_that_cannot_fit_and_the_launch_refuses_it_in_words(
        model_check_at_launch, tiny_model_dir, server):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory()
    mailbox = mcp_server_factory(project=project, name="mailbox", tools=mail_tools(4), tools_listed_at=timezone.now())
    scenario_set_factory(project=project, name="mail tasks")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        log_in(page, server, project.owner.username)

        page.goto(f"{server}/projects/{project.pk}/agents/new/")
        expect(page.locator("#prompt-budget-pending")).to_be_visible(timeout=15_000)
        page.fill("#id_name", "mail agent")
        page.select_option("#id_base_model", TEST_TINY_MODEL)  # tiny_model_dir, by its catalogue name
        page.fill("#id_system_prompt", SYSTEM)
        page.select_option("#id_environment_kind", "mcp")
        page.select_option("#id_mcp_server", str(mailbox.pk))
        page.fill("#id_max_tokens", "256")
        page.locator("#id_max_tokens").dispatch_event("change")
        problem = page.locator("#prompt-budget-problem")
        expect(problem).to_contain_text("the prompt does not fit the model", timeout=30_000)
        expect(problem).to_contain_text("(the system prompt and its 4 tools)")
        expect(problem).to_contain_text("more than the model's context of 1024 tokens")
        expect(page.locator("#prompt-budget-sets")).to_contain_text("mail tasks")
        page.screenshot(path=str(SHOTS / "agent-form-prompt-does-not-fit.png"), full_page=True)
        page.click("button[type=submit].primary")  # saved anyway: the warning is advice, the launch decides
        expect(page).to_have_url(f"{server}/projects/{project.pk}/", timeout=15_000)

        agent = project.agents.get(name="mail agent")
        page.goto(f"{server}/projects/{project.pk}/runs/new/")
        page.fill("#id_name", "mail run")
        page.select_option("#id_agent", str(agent.pk))
        page.select_option("#id_scenario_set", label="mail tasks")
        page.click("#launch")
        refusal = page.locator("#err-agent")
        expect(refusal).to_contain_text("the prompt does not fit the model", timeout=30_000)
        expect(refusal).to_contain_text("(the system prompt, its 4 tools and the longest scenario, ")
        expect(refusal).to_contain_text("plus max tokens 256")
        page.screenshot(path=str(SHOTS / "launch-refuses-prompt-past-context.png"), full_page=True)
        assert not Run.objects.filter(project=project).exists()

        page.goto(f"{server}/agents/{agent.pk}/")
        page.fill("#id_max_tokens", "64")
        page.locator("#id_max_tokens").dispatch_event("change")
        expect(page.locator("#prompt-budget-outcome")).to_have_attribute("data-fits", "1", timeout=30_000)
        expect(page.locator("#prompt-budget-numbers")).to_contain_text("of the model's 1024-token context")
        browser.close()
