"""The run page's held-out evaluation in a real browser (headless Debian chromium via Playwright): a real demo
run on the tiny model (8 held-out 2048 positions, env reward) is recorded through the engine's events, then the
win-rate curve, the monitors and the checkpoint table are drawn. Screenshots go to var/screenshots/."""
from __future__ import annotations

import pytest

from tests.webapp.factories import PASSWORD, project_factory, run_factory
from tests.webapp.test_browser import ARGS, CHROMIUM, SHOTS, server  # noqa: F401 - the daphne fixture
from training.demo import demo_config
from training.loop import run as train_run
from webapp.live.ingest import run_event_ingest
from webapp.models import RunStatus

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason="needs chromium")]


def test_the_run_page_draws_the_held_out_win_rate_curve_monitors_and_checkpoints(server, tiny_model_dir,  # noqa: F811
                                                                                tmp_path):
    from playwright.sync_api import expect, sync_playwright

    project = project_factory(name="Eval project")
    run = run_factory(project=project, status=RunStatus.RUNNING, steps=10, name="demo-eval")
    config = demo_config(out_dir=tmp_path / "run", steps=10, model_dir=tiny_model_dir, name="demo-eval")
    config = config.model_copy(update={"evaluation": config.evaluation.model_copy(update={"every": 2})})
    events = []
    train_run(config, sink=events.append)  # the engine's own events; recorded after (the ORM is sync)
    for event in events:
        run_event_ingest(run_id=run.pk, event=event.to_dict())
    evaluations = [e for e in events if e.kind == "evaluation"]
    assert [e.step for e in evaluations] == [2, 4, 6, 8, 10]

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server + "/login/")
        page.fill("#id_username", project.owner.username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{server}/runs/{run.pk}/")
        expect(page.locator("#eval-chart .main-svg").first).to_be_visible(timeout=30_000)
        expect(page.locator("#monitor-chart .main-svg").first).to_be_visible()
        points = page.evaluate("document.getElementById('eval-chart').data[2].y.length")
        assert points == 5
        best = page.locator("#checkpoint-table tr.best")
        expect(best).to_have_count(1)
        expect(best.locator("a.fork")).to_be_visible()
        page.locator("#eval-chart").screenshot(path=str(SHOTS / "evaluation-curve.png"))
        page.locator("#monitor-chart").screenshot(path=str(SHOTS / "monitors.png"))
        page.screenshot(path=str(SHOTS / "run-evaluation-page.png"), full_page=True)
        browser.close()
