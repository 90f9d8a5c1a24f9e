"""A newcomer's first hour in a real browser (Debian chromium via Playwright, headless; issue 48): from a fresh
account with no project, clicks through the guided start to a live run, overrides a score, opens the rubric
playground from the run, re-scores with an edited rubric, saves it and relaunches a run from it. Along the way it
does what people do: Back after Launch, a reload of the live page, a double click on the override. Screenshots go
to var/screenshots/."""
from __future__ import annotations

import re

import pytest

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.webapp.factories import TEST_TINY_MODEL, user_factory
from tests.webapp.browser import SHOTS, launch_chromium, live_settled, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from webapp.models import Project, Run, RunStatus, ScoreOverride

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

CARD_FIELDS = ("label", "rank", "judge", "human", "effective", "answer")  # what a scored card says of each answer


def _cards(page) -> dict[str, list[tuple[str, ...]]]:
    """Every group card on the run page: its answers' fields, by the card's id."""
    return page.evaluate("""(fields) => Object.fromEntries([...document.querySelectorAll('#groups .group')].map(
        g => [g.id, [...g.querySelectorAll('tr.trajectory')].map(
            row => fields.map(f => (row.querySelector('td.' + f) || {innerText: ''}).innerText.trim()))]))""",
                         list(CARD_FIELDS))


def test_a_newcomer_clicks_from_no_project_to_a_live_run_an_override_and_a_playground_relaunch(
        server, tiny_model_dir):  # noqa: F811
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    newcomer = user_factory()
    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as judge, launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        page.on("dialog", lambda dialog: dialog.accept())  # "Cancel this run?"
        overrides_sent: list[str] = []
        page.on("request", lambda r: r.method == "POST" and "/override/" in r.url and overrides_sent.append(r.url))
        log_in(page, server, newcomer.username)

        # The guided start: the example is chosen already; the model is a click in the deployment's list.
        page.goto(f"{server}/")
        expect(page.locator("#guided-start-form")).to_be_visible()
        page.check(f"input[name=base_model][value={TEST_TINY_MODEL}]")
        page.screenshot(path=str(SHOTS / "first-hour-guided-start.png"), full_page=True)
        page.click("#guided-launch")
        expect(page.locator("#run-status")).to_have_text(re.compile(r"^(Queued|Running)$"))
        run = Run.objects.get()
        assert page.url.endswith(f"/runs/{run.id}/") and run.project.owner == newcomer
        assert run.agent.base_model == TEST_TINY_MODEL and not run.uses_judge

        # Back after Launch, and Launch again where the browser shows the form as it was: the same run.
        page.go_back()
        if page.locator("#guided-launch").count():
            page.click("#guided-launch")
            page.wait_for_url(re.compile(rf"/runs/{run.id}/$"))
        assert Run.objects.count() == 1 and Project.objects.count() == 1

        # The run page, left open: the first scored group arrives live, and a reload shows the same cards.
        page.goto(f"{server}/runs/{run.id}/")
        page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page
        expect(page.locator("#groups .group tr.trajectory").first).to_be_visible(timeout=120_000)
        page.click("#pause")  # hold the run still while the newcomer looks around
        expect(page.locator("#run-status")).to_have_text("Paused", timeout=120_000)
        live = live_settled(page, lambda: _cards(page))
        assert page.evaluate("window.__sameDocument") is True
        page.screenshot(path=str(SHOTS / "first-hour-live-run.png"), full_page=True)
        page.reload()
        assert live and _cards(page) == live

        # The first group, side by side: a score overridden with a reason; the save double-clicked.
        page.locator("#groups .group .side-link").last.click()
        column = page.locator(".column").last
        column.locator("input[name=score]").fill("1")
        column.locator("input[name=reason]").fill("the move keeps the board open")
        column.locator(".override-form button").dblclick()
        expect(page.locator(".messages")).to_contain_text("score overridden")
        expect(page.locator(".column").filter(has_text="the move keeps the board open").locator(".human")).to_have_text(
            "1.000")
        page.screenshot(path=str(SHOTS / "first-hour-override.png"), full_page=True)
        assert overrides_sent and ScoreOverride.objects.filter(run=run).count() == 1

        # A judge for the playground (the guided run is scored by its game), from the project page.
        page.click(f"header >> text={run.project.name}")
        page.click("text=New judge")
        page.fill("#id_name", "double")
        page.fill("#id_model", judge.model)
        page.fill("#id_api_base", judge.api_base)
        page.fill("#id_api_key", "test")
        page.click("button:has-text('Save')")
        expect(page.locator(".messages")).to_contain_text("judge 'double' created")

        # The playground, opened from the run: its groups chosen, a rubric written, re-scored, saved, relaunched.
        page.goto(f"{server}/runs/{run.id}/")
        page.click("#run-playground-link")
        expect(page.locator("#id_groups input[type=checkbox]:checked")).to_have_count(run.groups.count())
        page.fill("#id_text", "Prefer a legal move, with nothing else.")
        page.click("#rescore")
        expect(page.locator("#rescore-status")).to_have_text("Done", timeout=60_000)
        page.click("#save-as-version")
        expect(page.locator(".messages")).to_contain_text("saved as")
        page.screenshot(path=str(SHOTS / "first-hour-playground-saved.png"), full_page=True)
        page.click("#launch-from")
        page.fill("#id_steps", "1")  # one step to see the new rubric at work (and nothing long left to stop)
        page.click("#launch")
        expect(page.locator("#run-status")).to_have_text(re.compile(r"^(Queued|Running)$"))
        relaunched = Run.objects.exclude(pk=run.pk).get()
        assert page.url.endswith(f"/runs/{relaunched.id}/")
        assert relaunched.rubric_version.text == "Prefer a legal move, with nothing else."
        assert relaunched.agent_id == run.agent_id and relaunched.scenario_set_id == run.scenario_set_id
        assert relaunched.judge_config.name == "double" and relaunched.config["steps"] == 1
        expect(page.locator("#run-header")).to_contain_text(f"with rubric {relaunched.rubric_version}")
        page.screenshot(path=str(SHOTS / "first-hour-relaunched.png"), full_page=True)

        # The first run is left for the new one: cancelled from its page. The new one, of one step, is left to
        # finish: cancelling it would wait for its engine's next phase boundary.
        page.goto(f"{server}/runs/{run.id}/")
        page.click("#cancel")
        expect(page.locator("#run-status")).to_have_text("Cancelled", timeout=60_000)

    assert Run.objects.count() == 2 and ScoreOverride.objects.count() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_picking_a_game_in_the_guided_start_picks_the_model_warmed_up_for_it(server):  # noqa: F811
    """The page opens on 2048 and its model; a person who then clicks a game must not launch it on the 2048 model
    (it never learnt the game's answer format), so the click selects the game's own model. The model stays theirs
    to change, and the choice they make is what gets sent."""
    newcomer = user_factory()
    with launch_chromium() as browser:
        page = browser.new_page()
        log_in(page, server, newcomer.username)
        page.goto(f"{server}/")
        models = "input[name=base_model][value={}]".format
        assert page.is_checked("input[name=example][value=game_2048]") and page.is_checked(models("tiny-2048"))
        page.check("input[name=example][value=tictactoe-random]")
        assert page.is_checked(models("tiny-games")) and not page.is_checked(models("tiny-2048"))
        page.check(models(TEST_TINY_MODEL))  # the person's own choice after the click
        assert page.is_checked(models(TEST_TINY_MODEL))
        page.check("input[name=example][value=game_2048]")
        assert page.is_checked(models("tiny-2048"))
        page.check("input[name=example][value=blank]")  # no model of its own: the selection stays as it was
        assert page.is_checked(models("tiny-2048"))
