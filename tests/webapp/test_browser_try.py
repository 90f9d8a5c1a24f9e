"""Using what a run trained, in a real browser (Debian chromium via Playwright, headless) against daphne with the
embedded executor (issue 37): Try it with the base and two checkpoints of a completed run on the tiny model, side
by side, filled in live over the page's socket (the answers growing as they are sampled) as a reload shows it;
judged by the judge double over HTTP + litellm; one answer saved as a scenario. Then the served checkpoint
answers an `openai` client with the project's token, and another project's token is refused."""
from __future__ import annotations

import re

import openai
import pytest

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.webapp.factories import (
    agent_factory, judge_factory, project_factory, rubric_factory, scenario_set_factory,
)
from tests.webapp.serving_world import completed_run, lora_adapters, served_app  # noqa: F401  (fixtures)
from tests.webapp.browser import SHOTS, launch_chromium, live_settled, log_in
from webapp.models import Scenario
from webapp.services.project_tokens import project_token_create

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

# Installed before each page's own scripts: the status and each column's answer every time the page changes.
RECORD_VIEWS = """window.seenViews = [];
new MutationObserver(() => {
  const status = document.getElementById("try-status");
  const texts = Array.from(document.querySelectorAll(".try-column"),
    (c) => Array.from(c.querySelectorAll(".try-answer"), (a) => a.textContent).join(""));
  window.seenViews.push({status: status ? status.textContent.trim() : "", texts});
}).observe(document, {childList: true, subtree: true, characterData: true});"""
ANSWERS = "() => Array.from(document.querySelectorAll('.try-column')).map((c) => c.textContent.replace(/\\s+/g, ' ').trim())"


def test_try_it_side_by_side_judged_saved_then_served_to_an_openai_client(served_app, lora_adapters,  # noqa: F811
                                                                          tiny_model_dir):
    from playwright.sync_api import expect

    project = project_factory(name="Try project")
    run = completed_run(project=project, model_dir=tiny_model_dir, adapters=lora_adapters[:2], max_tokens=24,
                        name="demo")
    agent_factory(project=project, name="other agent", base_model=str(tiny_model_dir),
                  system_prompt="Answer as a pirate.")
    first_agent = run.agent  # read here: no database call inside the Playwright block
    rubric_factory(project=project, text="Prefer short answers.")
    scenario_set = scenario_set_factory(project=project, scenarios=0, name="kept questions")
    judge = JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)).__enter__()
    judge_factory(project=project, name="double", model=judge.model, api_base=judge.api_base)
    try:
        with launch_chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            log_in(page, served_app, project.owner.username)
            page.click("text=Try project")
            page.click("#try-link")
            # Choosing an agent loads its system prompt into the box and says whose it is (issue 48).
            page.select_option("#id_agent", label="other agent")
            expect(page.locator("#id_system_prompt")).to_have_value("Answer as a pirate.")
            expect(page.locator("#prompt-source")).to_contain_text("other agent")
            page.select_option("#id_agent", label=str(first_agent))
            expect(page.locator("#id_system_prompt")).to_have_value(first_agent.system_prompt)
            expect(page.locator("#prompt-source")).to_contain_text(first_agent.name)
            page.select_option("#id_checkpoints", label=["demo · step 1 (demo@1)", "demo · step 2 (demo@2)"])
            page.fill("#id_message", "What is the refund policy? <b>bold</b>")
            # The session's view comes over its socket (issue 48): the page's htmx polling is refused here, so
            # what grows on screen is what the socket sent; every view the page shows is recorded as it changes.
            polls: list[str] = []
            page.route(re.compile(r"/try/\d+/$"), lambda route: (polls.append(route.request.url), route.abort())
                       if route.request.headers.get("hx-request") else route.continue_())
            page.add_init_script(RECORD_VIEWS)
            page.click("#ask")
            expect(page.locator("#try-status")).to_have_text("Done", timeout=180_000)
            seen = page.evaluate("window.seenViews")
            live = [v["texts"] for v in seen if v["status"] != "Done" and len(v["texts"]) == 3]  # the session's
            final = page.evaluate("""() => Array.from(document.querySelectorAll('.try-column'),
                (c) => Array.from(c.querySelectorAll('.try-answer'), (a) => a.textContent).join(''))""")
            # Views came while it ran, over the socket alone (polls refused), each answer a prefix of its final
            # text: how many lengths a tiny model's answer is caught at depends on its speed, so that is not counted.
            assert live and polls == []
            assert all(final[i].startswith(texts[i]) for texts in live for i in range(3)), (live, final)
            expect(page.locator(".try-column")).to_have_count(3)
            expect(page.locator(".try-label")).to_have_text(["base", "demo@1", "demo@2"])
            expect(page.locator(".try-source")).to_have_text([
                "base model, no checkpoint", "checkpoint of run demo, step 1", "checkpoint of run demo, step 2"])
            expect(page.locator(".try-column[data-status=done]")).to_have_count(3)
            expect(page.locator("#try-server")).to_contain_text("the inference server started for this session in")
            expect(page.locator("#try-first-answer")).to_contain_text("first answer")
            expect(page.locator("#try-message")).to_have_text("What is the refund policy? <b>bold</b>")  # escaped
            live = live_settled(page, lambda: page.evaluate(ANSWERS))
            page.reload()
            assert page.evaluate(ANSWERS) == live

            page.select_option("#id_rubric_version", index=1)
            page.select_option("#id_judge_config", index=1)
            page.click("#judge-these")
            expect(page.locator("#try-judge-status")).to_have_text("Judged", timeout=60_000)
            expect(page.locator(".try-score")).to_have_count(3)
            assert len(judge.requests) == 1
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "try-it.png"), full_page=True)

            column = page.locator(".try-column[data-column='2']")
            column.locator("select[name=scenario_set]").select_option(label="kept questions")
            column.locator("input[name=external_id]").fill("refund-question")
            column.locator("button:has-text('Save as scenario')").click()
            expect(page.locator(".messages")).to_contain_text("saved as scenario refund-question of kept questions")
            browser.close()

    finally:
        judge.__exit__(None, None, None)
    saved = Scenario.objects.get(scenario_set=scenario_set, external_id="refund-question")
    assert saved.user_message == "What is the refund policy? <b>bold</b>" and saved.metadata["answered_by"] == "demo@2"

    _, key = project_token_create(user=project.owner, project=project, name="my app")
    checkpoint = run.checkpoints.get(step_index=2)
    client = openai.OpenAI(base_url=f"{served_app}/api/checkpoints/{checkpoint.pk}/openai/v1", api_key=key,
                           max_retries=0, timeout=120)
    answer = client.chat.completions.create(model="demo@2", messages=[{"role": "user", "content": "Hello"}],
                                            max_tokens=8)
    assert answer.model == "demo@2" and answer.choices[0].message.content is not None
    other = project_factory()
    _, their_key = project_token_create(user=other.owner, project=other, name="theirs")
    with pytest.raises(openai.NotFoundError, match="no such checkpoint"):  # as an id that does not exist
        openai.OpenAI(base_url=f"{served_app}/api/checkpoints/{checkpoint.pk}/openai/v1", api_key=their_key,
                      max_retries=0).chat.completions.create(model="demo@2", messages=[{"role": "user", "content": "x"}])
