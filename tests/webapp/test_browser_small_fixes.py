"""Issue 18's smaller defects and its errors-for-people, in a real browser (headless Debian chromium via
Playwright): "Evaluate now" answers its click on the page and ends live; the playground's table keeps Candidate
and Δ on the card; a failed run, a refused launch and a filtered run list read as the pages' own words.
Screenshots go to var/screenshots/."""
from __future__ import annotations


import pytest

from tests.webapp.factories import judge_factory, project_factory, run_factory, scenario_set_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_user_errors import JUDGE_DOWN
from webapp.live.ingest import run_event_ingest
from webapp.models import Rescore, RunStatus, Scenario

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


def test_evaluate_now_says_it_started_and_shows_how_it_ended_without_a_reload(server):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory()
    scenario_set = scenario_set_factory(project=project, scenarios=2)
    Scenario.objects.create(scenario_set=scenario_set, external_id="v1", user_message="Held out?",
                            split=Scenario.Split.VALIDATION)
    run = run_factory(project=project, scenario_set=scenario_set, status=RunStatus.COMPLETED)
    # A checkpoint whose adapter is gone: the evaluation really runs, and fails, in the server's executor.
    run_event_ingest(run_id=run.pk, event={"kind": "checkpoint_saved", "step": 1, "path": "/nonexistent/0001",
                                           "adapter_name": "r@1"})
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(page, server, project.owner.username)
        page.goto(f"{server}/runs/{run.pk}/")
        page.evaluate("window.__sameDocument = true")
        page.click("#checkpoint-table button.evaluate")
        pending = page.locator("#evaluating-1")
        expect(pending).to_be_visible(timeout=10_000)
        expect(pending).to_contain_text("evaluation failed", timeout=120_000)  # from the websocket, no reload
        assert page.evaluate("window.__sameDocument") is True
        page.locator("#checkpoint-table").screenshot(path=str(SHOTS / "evaluate-now-feedback.png"))
        browser.close()


def test_the_pages_explain_errors_and_keep_their_columns_on_the_card(server):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory(name="Shop assistant")
    failed = run_factory(project=project, status=RunStatus.FAILED, error=JUDGE_DOWN, name="refunds-v1")
    run_factory(project=project, name="shipping-v1")
    judge = judge_factory(project=project)
    long = "The refund window is thirty days from delivery, and " * 6
    rescore = Rescore.objects.create(
        project=project, rubric_text="Prefer faithful answers.", judge_config=judge, judge_model=judge.model,
        group_ids=[1], status="done", summary={"calls": 1, "cache_hits": 0, "rank_changes": 1},
        results=[{"group_id": 1, "step": 1, "group_index": 0, "scenario": "s1", "rank_changes": 1, "trajectories": [
            {"index": i, "answer": long, "human": None, "current": 0.5 - i / 10, "rank_current": i + 1,
             "new": 0.3 + i / 10, "rank_new": 2 - i, "delta": i / 5 - 0.2, "explanation": long} for i in range(2)]}])
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        log_in(page, server, project.owner.username)

        page.goto(f"{server}/playground/{rescore.pk}/")
        card = page.locator(".rescore-group").first.bounding_box()
        delta = page.locator(".rescore-group th", has_text="Δ score").first.bounding_box()
        candidate = page.locator(".rescore-group th", has_text="Candidate").first.bounding_box()
        assert delta["x"] + delta["width"] <= card["x"] + card["width"] and candidate["x"] < delta["x"]
        page.screenshot(path=str(SHOTS / "playground-table-fits.png"), full_page=True)

        page.goto(f"{server}/runs/{failed.pk}/")
        expect(page.locator("#run-error")).to_contain_text("The judge's server answered with an error of its own")
        expect(page.locator("#run-error-details pre")).to_be_hidden()  # folded until asked for
        page.locator("#run-header").screenshot(path=str(SHOTS / "run-error-for-people.png"))

        page.goto(f"{server}/projects/{project.pk}/runs/new/")
        page.fill("#id_name", "no-judge")
        page.click("#launch")
        expect(page.locator("#err-judge_config")).to_contain_text("choose a judge to score them")
        page.screenshot(path=str(SHOTS / "launch-needs-a-judge.png"), full_page=True)

        page.goto(f"{server}/projects/{project.pk}/runs/?q=refunds")
        expect(page.locator("#run-rows")).to_contain_text("refunds-v1")
        expect(page.locator("#run-rows")).not_to_contain_text("shipping-v1")
        page.screenshot(path=str(SHOTS / "runs-search.png"))
        browser.close()
