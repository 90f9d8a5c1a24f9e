"""Games in a real browser (Debian chromium via Playwright, headless): an owner creates the self-play Tic Tac Toe
agent from its example, then, on a self-play step's group page, goes to the other side of a game in one click."""
from __future__ import annotations


import pytest

from tests.webapp.factories import project_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_episodes import _engine_groups, _ingest
from tests.webapp.factories import run_factory
from webapp.models import Agent, RunStatus, TrajectoryGroup

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def test_an_owner_creates_a_game_agent_from_an_example_and_reaches_the_other_side_of_a_game_in_one_click(
        server):  # noqa: F811
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Games")
    run = run_factory(project=project, status=RunStatus.RUNNING)
    x_group, o_group = _ingest(run, _engine_groups()[0])
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)

        page.goto(f"{server}/projects/{project.id}/")
        page.click("#agent-from-example")
        page.select_option("#id_example", "tictactoe-self")
        page.select_option("#id_base_model", "tiny-2048")
        page.fill("#id_scenarios", "5")
        page.fill("#id_held_out", "2")
        page.click("button[type=submit]")
        expect(page.locator("body")).to_contain_text("Tic Tac Toe against itself")
        assert Agent.objects.get(project=project, environment_kind="tictactoe").environment_options == {
            "opponent": "self"}

        page.goto(f"{server}/groups/{x_group.id}/")
        expect(page.locator("#group-role")).to_have_text("role x")
        page.locator("a.other-side").first.click()
        expect(page.locator("#trajectory-role")).to_have_text("o")
        page.screenshot(path=str(SHOTS / "games-other-side.png"))
        other = TrajectoryGroup.objects.get(pk=o_group.pk).trajectories.values_list("id", flat=True)
        assert int(page.url.rstrip("/").rsplit("/", 1)[1]) in set(other)
        browser.close()
