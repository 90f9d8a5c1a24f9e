"""The run page's held-out evaluation in a real browser (headless Debian chromium via Playwright): a real demo
run on the tiny model (8 held-out 2048 positions, env reward; the demo's 24 would be slower) is recorded through
the engine's events, then the win-rate curve with its band, the monitors and the checkpoint table are drawn.
Screenshots go to var/screenshots/."""
from __future__ import annotations

import pytest

from tests.webapp.factories import project_factory, run_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from training import run as train_run
from training.fixtures.demo import demo_config
from webapp.live.ingest import run_event_ingest
from webapp.models import RunStatus

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


def test_the_run_page_draws_the_held_out_win_rate_curve_monitors_and_checkpoints(server, tiny_model_dir,  # noqa: F811
                                                                                tmp_path):
    from playwright.sync_api import expect

    project = project_factory(name="Eval project")
    run = run_factory(project=project, status=RunStatus.RUNNING, steps=6, name="demo-eval")
    config = demo_config(out_dir=tmp_path / "run", steps=6, model_dir=tiny_model_dir, name="demo-eval", held_out=8)
    config = config.model_copy(update={"evaluation": config.evaluation.model_copy(update={"every": 2})})
    events = []
    train_run(config, sink=events.append)  # the engine's own events; recorded after (the ORM is sync)
    for event in events:
        run_event_ingest(run_id=run.pk, event=event.to_dict())
    evaluations = [e for e in events if e.kind == "evaluation"]
    assert [e.step for e in evaluations] == [2, 4, 6]

    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(page, server, project.owner.username)
        page.goto(f"{server}/runs/{run.pk}/")
        expect(page.locator("#eval-chart .main-svg").first).to_be_visible(timeout=30_000)
        expect(page.locator("#monitor-chart .main-svg").first).to_be_visible()
        points = page.evaluate("document.getElementById('eval-chart').data[2].y.length")
        assert points == 3
        band = page.evaluate("document.getElementById('eval-chart').data[1].y")  # the band's lower edge
        assert band == pytest.approx([e.metrics["eval_ci_low"] for e in evaluations])
        expect(page.locator("#checkpoint-table")).to_contain_text("8 scenarios × 4 answers a side")
        expect(page.locator("#checkpoint-table td.verdict .badge")).to_have_count(3)
        best = page.locator("#checkpoint-table tr.best")
        expect(best).to_have_count(1)
        expect(best.locator("a.fork")).to_be_visible()
        page.locator("#eval-chart").screenshot(path=str(SHOTS / "evaluation-curve.png"))
        page.locator("#monitor-chart").screenshot(path=str(SHOTS / "monitors.png"))
        top = page.locator("#checkpoint-table").bounding_box()
        page.screenshot(path=str(SHOTS / "run-evaluation-page.png"), full_page=True,
                        clip={"x": 0, "y": 0, "width": 1400, "height": top["y"] + top["height"] + 20})
        browser.close()


def test_the_scenario_generator_drafts_reviews_and_accepts_in_the_browser(server, tmp_path):  # noqa: F811
    from tests.judge_double import JudgeDouble
    from tests.judging.groups import quality_rule, trajectory
    from tests.judging.test_bias import QUALITIES
    from tests.webapp.factories import judge_factory, scenario_set_factory
    from tests.webapp.test_scenario_generator import DRAFTS
    from webapp.models import Trajectory, TrajectoryGroup
    from webapp.services.secrets import secret_encrypt

    project = project_factory(name="Generator project")
    scenario_set = scenario_set_factory(project=project, scenarios=1, name="shoe shop")
    run = run_factory(project=project)
    for g, qualities in enumerate(QUALITIES):  # stored groups for the judge check
        group = TrajectoryGroup.objects.create(run=run, step_index=1, index=g, scenario_external_id=f"s{g}")
        for i, q in enumerate(qualities):
            Trajectory.objects.create(group=group, index=i, messages=trajectory(q, tag=f"g{g}a{i}"))

    def respond(request):  # one double: drafts scenarios when asked to, judges like a first-position judge
        if "scenarios. For each give" in request.prompt_text:
            return DRAFTS
        return JudgeDouble.prefer_first(quality_rule, bonus=0.3)(request)

    SHOTS.mkdir(parents=True, exist_ok=True)
    with JudgeDouble(responder=respond) as double:
        judge = judge_factory(project=project, name="double", api_base=double.api_base,
                              api_key_encrypted=secret_encrypt(plaintext="test"))
        with launch_chromium() as browser:
            _generate_and_check(browser, server, project, scenario_set, judge)


def _generate_and_check(browser, server: str, project, scenario_set, judge) -> None:
    """The browser half, on rows the test made first."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    log_in(page, server, project.owner.username)
    page.goto(f"{server}/scenario-sets/{scenario_set.pk}/")
    page.click("#generate-link")
    page.fill("#task", "Answer customers' questions for an online shoe shop: returns, shipping, sizes.")
    page.fill("#n", "3")
    page.click("#draft-form button")
    expect(page.locator("#drafts tbody tr")).to_have_count(2)
    expect(page.locator("text=1 duplicate removed")).to_be_visible()
    page.fill("textarea[name=user_message-0]", "Can I return shoes after 45 days?")
    page.select_option("select[name=split-0]", "validation")
    page.screenshot(path=str(SHOTS / "scenario-generator.png"), full_page=True)
    page.click("#accept")
    expect(page.locator(".messages")).to_contain_text("added 2 generated scenarios")
    expect(page.locator("td", has_text="Can I return shoes after 45 days?")).to_be_visible()
    expect(page.locator("td", has_text="<b>Do you ship to Norway?</b>")).to_be_visible()  # escaped text

    page.goto(f"{server}/judges/{judge.pk}/")
    page.click("#judge-check-link")
    page.click("#run-check")
    expect(page.locator("#flips-single")).to_contain_text("9 (38%)")
    expect(page.locator("#flips-multi")).to_contain_text("3 (12%)")
    page.screenshot(path=str(SHOTS / "judge-check.png"), full_page=True)
    browser.close()
