"""A long run's page left open (found trying the Tic Tac Toe example as a newcomer: after 150 steps the open page
held 600 group cards, one fetch each, and a screenshot of it timed out, where a reload shows 20). Live, the group
list keeps a page of the newest groups, as a reload shows them, and "Older groups" after them fetches what follows,
never a card twice (Debian chromium via Playwright, headless; the scripted engine: pages, not training)."""
from __future__ import annotations

import pytest

from tests.webapp.browser import launch_chromium, log_in
from tests.webapp.conftest import wait_for
from tests.webapp.factories import agent_factory, project_factory, scenario_set_factory
from tests.webapp.test_browser_live_truth import scripted_server  # noqa: F401 - the scripted daphne fixture
from webapp.models import Run, RunStatus, TrajectoryGroup
from webapp.views.runs import GROUPS_PER_PAGE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]
CARDS = "() => Array.from(document.querySelectorAll('#groups > [data-step]')).map((card) => card.id)"
STEPS, PER_STEP = 7, 4  # 28 groups: a page of 20, and 8 older


def _newest_first(run: Run) -> list[str]:
    return [f"group-{pk}" for pk in TrajectoryGroup.objects.filter(run=run).order_by("-step_index", "index")
            .values_list("pk", flat=True)]


def test_a_run_page_left_open_keeps_the_newest_page_of_groups_and_older_groups_fetches_the_rest(
        scripted_server):  # noqa: F811
    server = scripted_server
    project = project_factory()
    agent = agent_factory(project=project, name="steady", environment_options={"exact_match": True, "phase_s": 0.1})
    scenario_set_factory(project=project, name="tasks", scenarios=PER_STEP)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        page.goto(f"{server}/projects/{project.id}/runs/new/")
        page.select_option("#id_agent", str(agent.id))
        page.fill("#id_name", "long")
        page.fill("#id_steps", str(STEPS))
        page.fill("#id_group_size", "2")
        page.fill("#id_groups_per_step", str(PER_STEP))
        page.click("#launch")
        page.wait_for_url("**/runs/*/")  # the page is open from the first step on; the groups come live
        run = Run.objects.get(project=project, name="long")

        def shown() -> str:
            return f"cards {page.evaluate(CARDS)}, groups newest first {_newest_first(run)}"

        wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.COMPLETED, timeout=60, message="the run ends")
        newest = _newest_first(run)
        assert len(newest) == STEPS * PER_STEP
        wait_for(lambda: page.evaluate(CARDS) == newest[:GROUPS_PER_PAGE], timeout=30, explain=shown)
        page.wait_for_load_state("networkidle")
        assert page.evaluate(CARDS) == newest[:GROUPS_PER_PAGE]  # the oldest went as the newest came
        page.locator("#groups > button", has_text="Older groups").click()
        wait_for(lambda: page.evaluate(CARDS) == newest, timeout=30, explain=shown)  # the 8 that follow, each once
        assert page.locator("#groups > button").count() == 0

        page.reload()  # a reload builds the same list, a page and then the rest
        assert page.evaluate(CARDS) == newest[:GROUPS_PER_PAGE]
        page.locator("#groups > button", has_text="Older groups").click()
        wait_for(lambda: page.evaluate(CARDS) == newest, timeout=30, explain=shown)
        browser.close()
