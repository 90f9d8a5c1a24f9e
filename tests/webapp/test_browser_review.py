"""Review in a real browser (Debian chromium via Playwright, headless): an editor launches a gated run on the tiny
model; a reviewer overrides a judge score while the run waits, approves and watches the step train; compares two
trajectories side by side and moves between groups with the keyboard; tries a new rubric in the playground, which
the editor then saves as a new version. Screenshots go to var/screenshots/."""
from __future__ import annotations

import re

import pytest

from tests.judge_double import JudgeDouble, RecordedRequest, marker_or_brevity
from tests.webapp.factories import TEST_TINY_MODEL, member_factory, project_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from webapp.models import Agent, Role, Run, RunStatus, Scenario, ScenarioSet, ScoreOverride
from webapp.services.catalogue import judge_config_create, rubric_create

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


def _judge(request: RecordedRequest) -> dict:
    """The run's rubric scores brevity; a candidate that asks for longer answers reverses it (rank changes)."""
    longer = "Prefer longer" in request.prompt_text
    return JudgeDouble.score_by(lambda text: min(1.0, len(text) / 400) if longer else marker_or_brevity(text))(request)


def _login(browser, base: str, username: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    log_in(page, base, username)
    return page


def test_a_reviewer_overrides_a_gated_step_compares_answers_and_tries_a_rubric(server, tiny_model_dir):  # noqa: F811
    from playwright.sync_api import expect

    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Review project")
    owner = project.owner
    reviewer = member_factory(project=project, role=Role.REVIEWER)
    Agent.objects.create(project=project, name="2048 player", base_model=TEST_TINY_MODEL,
                         system_prompt=DEMO_SYSTEM_PROMPT, environment_kind="game_2048",
                         environment_options={"winning_tile": 64, "max_turns": 2}, max_tokens=12)
    games = ScenarioSet.objects.create(project=project, name="2048 games")
    Scenario.objects.bulk_create(Scenario(scenario_set=games, external_id=f"game-{k}", user_message=DEMO_USER_MESSAGE,
                                          metadata={"seed": 1000 + k}) for k in range(2))
    rubric_create(user=owner, project=project, name="good moves", text="Prefer a legal move, with nothing else.")
    with JudgeDouble(responder=_judge) as judge, launch_chromium() as browser:
        judge_config_create(user=owner, project=project, name="double", model=judge.model, api_base=judge.api_base,
                            api_key="test")

        editor = _login(browser, server, owner.username)
        editor.goto(f"{server}/projects/{project.id}/runs/new/")
        editor.fill("#id_name", "gated-run")
        editor.select_option("#id_rubric", label="good moves")
        editor.select_option("#id_judge_config", label="double (openai/judge)")
        editor.fill("#id_steps", "1")
        editor.fill("#id_learning_rate", "0.002")
        editor.fill("#id_overrides", '{"grpo": {"epochs_per_step": 1}}')  # a training setting; the CPU is the deployment's
        editor.check("#id_review_gate")
        editor.click("#launch")
        run = Run.objects.get(name="gated-run")
        assert run.review_gate

        page = _login(browser, server, reviewer.username)
        page.goto(f"{server}/runs/{run.id}/")
        expect(page.locator("#run-status")).to_have_text("Awaiting review", timeout=180_000)
        expect(page.locator("#review-wait")).to_contain_text("waits for review")
        assert not page.locator("#pause").count()  # a reviewer does not control runs
        page.locator(".group .side-link").first.click()
        expect(page.locator("#gate-note")).to_contain_text("overrides here change the rewards it trains on")
        last = page.locator(".column").last
        judge_score = last.locator(".judge").inner_text()
        last.locator("input[name=score]").fill("1")
        last.locator("input[name=reason]").fill("the only answer that keeps the tiles merging")
        last.locator(".override-form button").click()
        expect(page.locator(".messages")).to_contain_text("score overridden")
        expect(page.locator(".column").filter(has_text="the only answer that keeps").locator(".human")).to_have_text("1.000")
        page.screenshot(path=str(SHOTS / "review-override.png"), full_page=True)

        page.click("#gate-note #approve")
        expect(page.locator(".messages")).to_contain_text("review approved")
        page.goto(f"{server}/runs/{run.id}/")
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=180_000)
        expect(page.locator("#step-table tbody tr")).to_have_count(1)  # its row is a fetch that may land after
        overridden = ScoreOverride.objects.get(run=run).group_id
        # The card shows the advantages the step trained on, recomputed from the reviewed scores.
        expect(page.locator(f"#group-{overridden} .human").filter(has_text="1.000")).to_have_count(1)
        expect(page.locator(f"#group-{overridden} .badge.warn")).to_have_count(0)
        page.screenshot(path=str(SHOTS / "review-trained.png"), full_page=True)
        override = ScoreOverride.objects.get(run=run)
        assert override.applies_to_training and override.after == 1.0 and f"{override.judge_score:.3f}" == judge_score
        assert run.events.filter(kind="review_applied").exists()

        page.click("#review-link")
        expect(page.locator("#audit")).to_contain_text("changed the step's rewards")
        expect(page.locator("#audit")).to_contain_text(reviewer.username)
        page.screenshot(path=str(SHOTS / "review-page.png"), full_page=True)

        group = run.groups.order_by("index").first()
        page.goto(f"{server}/groups/{group.id}/")
        boxes = page.locator("#pick-form input[type=checkbox]")
        for i in range(2, boxes.count()):
            boxes.nth(i).uncheck()
        page.click("#compare-selected")
        expect(page.locator(".column")).to_have_count(2)
        expect(page.locator(".column").first.locator(".badge")).to_contain_text("reference")
        page.screenshot(path=str(SHOTS / "side-by-side.png"), full_page=True)
        page.keyboard.press("j")
        page.wait_for_url(re.compile(rf"/groups/{run.groups.order_by('index').last().id}/$"))

        page.goto(f"{server}/projects/{project.id}/")
        page.click("#playground-link")
        for box in page.locator("#id_groups input[type=checkbox]").all():
            box.check()
        page.fill("#id_text", "Prefer longer answers that explain the move.")
        page.click("#rescore")
        expect(page.locator("#rescore-status")).to_have_text("Done", timeout=60_000)
        expect(page.locator("#rescore-agreement")).to_be_visible()
        assert int(page.locator("#rank-changes").inner_text()) > 0
        page.screenshot(path=str(SHOTS / "playground.png"), full_page=True)
        assert not page.locator("#save-as-version").count()  # saving a rubric version is an editor's call

        editor.goto(page.url)
        editor.click("#save-as-version")
        expect(editor.locator(".messages")).to_contain_text("saved as good moves v2")
        expect(editor.locator("#launch-from")).to_be_visible()
        editor.screenshot(path=str(SHOTS / "playground-saved.png"), full_page=True)
        browser.close()

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.rubric_version.rubric.versions.count() == 2
    assert any("Prefer longer answers" in r.prompt_text for r in judge.requests)
