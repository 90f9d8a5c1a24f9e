"""The whole product in a real browser (Debian chromium driven by Playwright, headless): log in, build an agent,
upload scenarios, write a rubric, add the judge (an HTTP double), launch a run on the tiny model, watch groups and
the reward chart arrive without a reload, pause and resume. Screenshots go to var/screenshots/."""
from __future__ import annotations

import json
import re
import threading

import pytest

from tests.judge_double import JudgeDouble, marker_or_brevity
# The browser's one launcher; ARGS, CHROMIUM and log_in are re-exported for tests that still import them from here.
from tests.webapp.browser import ARGS, CHROMIUM, SHOTS, launch_chromium, log_in  # noqa: F401
# test_api_contract.py starts its own daphne with these names of the world's helpers
from tests.webapp.world import free_port as _free_port, listening as _up  # noqa: F401
from tests.webapp.factories import TEST_TINY_MODEL, project_factory
from webapp.models import Run, RunStatus

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


@pytest.fixture
def server(app_server) -> str:
    """The served app (tests/webapp/world.py): daphne on the test database, embedded executor and channel layer
    (runs in-process); its base URL."""
    return app_server.url


def test_a_user_builds_a_run_in_the_browser_and_watches_it_learn_live(server, tiny_model_dir, tmp_path):
    from playwright.sync_api import expect
    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Browser project")
    scenarios = tmp_path / "games.jsonl"
    scenarios.write_text("".join(json.dumps({"id": f"game-{k}", "user_message": DEMO_USER_MESSAGE,
                                             "metadata": json.dumps({"seed": 1000 + k})}) + "\n" for k in range(4)))
    # The run's first judged group is answered at once; the others wait until the run is paused, so the pause
    # lands before the last step whatever the machine's load (a pause during the last step's training ends the run:
    # there is no boundary left to hold at, and Resume would rightly be gone).
    score, paused, game_requests = JudgeDouble.score_by(marker_or_brevity), threading.Event(), []

    def respond(request):
        if DEMO_USER_MESSAGE in request.prompt_text:  # not the launch form's test request
            game_requests.append(request)
            if len(game_requests) > 1:
                paused.wait(timeout=120)
        return score(request)

    with JudgeDouble(responder=respond) as judge, launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        csp_violations: list[str] = []  # anything the Content Security Policy blocked on any page
        page.on("console", lambda m: "Content Security Policy" in m.text and csp_violations.append(m.text))
        page.set_default_timeout(30_000)

        log_in(page, server, project.owner.username)
        page.click("text=Browser project")

        page.click("text=New agent")
        page.fill("#id_name", "2048 player")
        page.select_option("#id_base_model", TEST_TINY_MODEL)  # tiny_model_dir, by its catalogue name
        page.fill("#id_system_prompt", DEMO_SYSTEM_PROMPT)
        page.select_option("#id_environment_kind", "game_2048")
        page.fill("#id_temperature", "9")  # inline validation flags it before saving
        page.locator("#id_temperature").blur()
        expect(page.locator("#err-temperature")).to_contain_text("less than or equal to 2")
        page.fill("#id_temperature", "1")
        page.fill("#id_environment_options", '{"winning_tile": 64, "max_turns": 6}')
        page.fill("#id_max_tokens", "16")
        page.click("button:has-text('Save')")
        expect(page.locator(".messages")).to_contain_text("agent '2048 player' created")

        page.click("text=New scenario set")
        page.fill("#id_name", "2048 games")
        page.click("button:has-text('Save')")
        page.set_input_files("#upload-form input[type=file]", str(scenarios))
        page.click("#upload-form button")
        expect(page.locator(".messages")).to_contain_text("imported 4 scenarios")

        page.click("header >> text=Browser project")
        page.click("text=New rubric")
        page.fill("#id_name", "good moves")
        page.fill("#id_text", "Prefer a legal move in the requested format, with nothing else.")
        page.click("button:has-text('Save')")
        expect(page.locator("h1")).to_contain_text("Rubric: good moves")

        page.click("header >> text=Browser project")
        page.click("text=New judge")
        page.fill("#id_name", "double")
        page.fill("#id_model", judge.model)
        page.fill("#id_api_base", judge.api_base)
        page.fill("#id_api_key", "test")
        page.click("button:has-text('Save')")

        page.click("text=Launch a run")
        page.fill("#id_name", "browser-run")
        page.select_option("#id_rubric", label="good moves")
        page.select_option("#id_judge_config", label="double (openai/judge)")
        page.fill("#id_steps", "4")
        page.fill("#id_learning_rate", "0.002")
        page.fill("#id_overrides", '{"grpo": {"epochs_per_step": 1}}')  # a training setting; the CPU is the deployment's
        page.click("#launch")
        expect(page.locator("#run-status")).to_have_text("Running", timeout=60_000)
        page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page

        # Groups stream in with the judge's explanations; no reload happens.
        expect(page.locator(".group").first).to_be_visible(timeout=120_000)
        # (cards stand in the reload's order, step by step in group order; a group of identical answers is not judged)
        expect(page.locator(".group .explanation").filter(has_text="rule gave").first).to_be_visible()
        page.screenshot(path=str(SHOTS / "run-live.png"), full_page=True)

        page.click("#pause")
        expect(page.locator("#run-status")).to_have_text(re.compile(r"^Paus(ing|ed)$"))  # "Pausing" until the engine holds
        paused.set()  # the engine scores what it has and holds at its next phase boundary
        paused_points = int(page.get_attribute("#reward-chart", "data-points"))
        assert paused_points <= 1  # at most step 1 trained: the later steps' groups waited for the pause
        page.screenshot(path=str(SHOTS / "run-paused.png"), full_page=True)
        page.click("#resume")
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=180_000)
        # The chart gained every step live (predicates are functions: the page's CSP forbids evaluating strings).
        page.wait_for_function("() => Number(document.getElementById('reward-chart').dataset.points) >= 4")
        assert int(page.get_attribute("#reward-chart", "data-points")) > paused_points
        assert page.evaluate("window.__sameDocument") is True
        expect(page.locator("#step-table tbody tr")).to_have_count(4)  # its rows are fetches that may land after
        assert csp_violations == []
        # Every group of every step arrived as a card, though groups of one step are scored moments apart.
        expect(page.locator(".group")).to_have_count(8)
        page.screenshot(path=str(SHOTS / "run-completed.png"), full_page=True)

        page.locator(".group .trajectory a").first.click()
        expect(page.locator("h1")).to_contain_text("rank 1 of")  # the answer's label (A, B, …) and its rank
        page.screenshot(path=str(SHOTS / "trajectory.png"), full_page=True)
        browser.close()

    run = Run.objects.get(name="browser-run")
    # Each group's judge accounting arrived as its own engine event (a group of identical attempts sends nothing)
    usage = list(run.events.filter(kind="judge_usage").values_list("payload", flat=True))
    assert run.status == RunStatus.COMPLETED and len(usage) == 8
    assert run.judge_calls.count() == sum(u["requests"] + u["cache_hits"] for u in usage) >= 1
    assert run.rubric_version.text.startswith("Prefer a legal move")
    probe, *scoring = judge.requests  # the launch tested the judge first (webapp/services/judge_probe.py)
    assert "What is 2 + 2?" in probe.prompt_text
    assert scoring and all("Prefer a legal move" in r.prompt_text for r in scoring)  # the rubric
    assert run.judge_calls.filter(prompt_tokens=120, completion_tokens=30).count() == run.judge_calls.count()
