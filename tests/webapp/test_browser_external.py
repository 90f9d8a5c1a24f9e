"""An external agent's run page in a real browser (Debian chromium via Playwright, headless): the panel of the
user's code's rollouts updates live as a client submits a group through the API, and equals what a reload shows."""
from __future__ import annotations


import httpx
import pytest
from rest_framework.authtoken.models import Token

from tests.webapp.browser import SHOTS, launch_chromium, live_settled, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_external_rollouts import external_run, open_step, recorded

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

PANEL = "() => Array.from(document.querySelectorAll('#external-state tr')).filter((r) => !r.querySelector('#external-deadline')).map((r) => r.textContent.replace(/\\s+/g, ' ').trim())"


def test_the_external_panel_shows_a_submitted_group_and_its_client_live_as_a_reload_does(server):  # noqa: F811
    from playwright.sync_api import expect

    run = external_run()
    model = open_step(run, allow_unsampled=True, timeout_s=600)
    recorded(run, "t1", "four", model=model)
    recorded(run, "t2", "five", model=model)
    key = Token.objects.create(user=run.project.owner).key
    with launch_chromium() as browser:
        page = browser.new_page()
        log_in(page, server, run.project.owner.username)
        page.goto(f"{server}/runs/{run.id}/")
        expect(page.locator("#external-groups")).to_contain_text("0 / 2")
        expect(page.locator("#external-clients")).to_contain_text("none in the last 30 s")
        expect(page.locator("#external-unsampled")).to_be_visible()  # the run trains on turns never sampled
        expect(page.locator("#live-indicator.on")).to_be_attached()
        response = httpx.post(f"{server}/api/runs/{run.id}/rollouts/groups/",
                              headers={"Authorization": f"Token {key}", "X-Client-Id": "laptop-1"},
                              json={"step": 1, "group_index": 0, "trajectories": [{"id": "t1"}, {"id": "t2"}]})
        assert response.status_code == 201, response.text
        expect(page.locator("#external-groups")).to_contain_text("1 / 2")
        expect(page.locator("#external-clients")).to_contain_text("laptop-1")
        deadline = page.locator("#external-deadline").text_content()
        assert 500 < float(deadline.split()[0]) <= 600
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "external-panel.png"), full_page=True)
        live = live_settled(page, lambda: page.evaluate(PANEL))  # the group's and the client's events each refetch it
        page.reload()
        assert page.evaluate(PANEL) == live
        browser.close()
