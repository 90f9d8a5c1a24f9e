"""Issue 18 in a real browser (Debian chromium via Playwright, headless): a group scored by the real judge scorer
(judge double over HTTP, which explains by its own shuffled numbers) shows its explanations in the page's
letters; after a reviewer overrides the judge's favourite to 0, the rank column and the group's mean follow the
human score on the run page, the side-by-side page and the trajectory page. Screenshots go to var/screenshots/."""
from __future__ import annotations

import re

import pytest

from tests.webapp.factories import member_factory, run_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_review_truth import _judged_group, _naming_judge
from webapp.models import Role, RunStatus

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


def _ranks(page) -> dict[str, str]:
    rows = page.locator("#groups tr.trajectory")
    return {rows.nth(i).get_attribute("data-label"): rows.nth(i).locator(".rank").inner_text().strip()
            for i in range(rows.count())}


def test_explanations_ranks_and_means_follow_the_page_labels_and_the_human_score(server, judge_double,  # noqa: F811
                                                                                 monkeypatch):
    from playwright.sync_api import expect

    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    SHOTS.mkdir(parents=True, exist_ok=True)
    judge_double.responder = _naming_judge
    run = run_factory(status=RunStatus.AWAITING_REVIEW, review_gate=True, name="truth-story")
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    a, b, c, d = _judged_group(run, judge_double, [0.9, 0.3, 0.6, 0.3])  # B and D: the same answer

    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, reviewer.username)

        page.goto(f"{server}/runs/{run.id}/")
        card = page.locator(f"#group-{a.group_id}")
        expect(card.locator('tr[data-label="A"] .explanation')).to_have_text("Attempt A; the best is attempt A.")
        expect(card.locator('tr[data-label="D"] .explanation')).to_have_text("Attempt D; the best is attempt A.")
        assert _ranks(page) == {"A": "1", "C": "2", "B": "3", "D": "4"}

        page.goto(f"{server}/groups/{a.group_id}/")
        column = page.locator(f"#col-{a.id}")
        column.locator("input[name=score]").fill("0")
        column.locator("input[name=reason]").fill("invents a refund window")
        column.locator(".override-form button").click()
        expect(page.locator(".messages")).to_contain_text("score overridden")
        expect(page.locator("#pick-form")).to_contain_text("A (rank 4)")
        expect(page.locator("main")).to_contain_text("mean reward 0.300")  # (0 + 0.3 + 0.6 + 0.3) / 4
        expect(page.locator(".judge-mean").first).to_have_text("judge mean 0.525")
        page.screenshot(path=str(SHOTS / "truth-group.png"), full_page=True)

        page.goto(f"{server}/runs/{run.id}/")
        assert _ranks(page) == {"C": "1", "B": "2", "D": "3", "A": "4"}
        header = page.locator(f"#group-{a.group_id} header").inner_text()
        assert re.search(r"mean reward 0\.300 ± [0-9.]+\s+judge mean 0\.525", header), header
        page.locator(f"#group-{a.group_id}").screenshot(path=str(SHOTS / "truth-run-card.png"))

        page.goto(f"{server}/trajectories/{c.id}/")
        expect(page.locator("h1")).to_contain_text("rank 1 of 4")
        expect(page.locator("main")).to_contain_text("Attempt C; the best is attempt A.")
        page.screenshot(path=str(SHOTS / "truth-trajectory.png"), full_page=True)
        browser.close()
