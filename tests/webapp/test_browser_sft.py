"""Teach, then reinforce, in a real browser (headless Debian chromium via Playwright, daphne with the embedded
executor and the real engine on the tiny model): upload a JSONL dataset, launch "Teach (SFT)" from it, watch
the loss curves grow live, then "Reinforce from this checkpoint": a GRPO run whose first rollouts use the SFT
checkpoint's adapter. Screenshots go to var/screenshots/."""
from __future__ import annotations

import json

import pytest

from tests.webapp.factories import TEST_TINY_MODEL, project_factory
from tests.webapp.browser import SHOTS, launch_chromium, live_settled, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from training.fixtures.demo import demo_config
from training.fixtures.tiny_model import synthetic_games
from webapp.models import Agent, Run, RunStatus, Scenario, ScenarioSet

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


def test_a_user_teaches_from_an_uploaded_dataset_then_reinforces_from_its_checkpoint(server, tiny_model_dir,  # noqa: F811
                                                                                    tmp_path):
    from playwright.sync_api import expect

    project = project_factory(name="Teach project")
    demo = demo_config(out_dir="unused", model_dir=tiny_model_dir)
    Agent.objects.create(project=project, name="2048 player", base_model=TEST_TINY_MODEL,
                         system_prompt=demo.system_prompt, environment_kind="game_2048",
                         environment_options={"winning_tile": 64, "max_turns": 2}, max_tokens=12)
    games = ScenarioSet.objects.create(project=project, name="2048 games")
    Scenario.objects.bulk_create(Scenario(scenario_set=games, external_id=s.id, user_message=s.user_message,
                                          metadata=s.metadata) for s in demo.scenarios[:4])
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"messages": g}) + "\n" for g in synthetic_games(16, seed=21)))

    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        csp_violations: list[str] = []
        page.on("console", lambda m: "Content Security Policy" in m.text and csp_violations.append(m.text))
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        page.click("text=Teach project")

        page.click("#dataset-new")
        page.fill("#id_name", "good games")
        page.click("button:has-text('Save')")
        page.set_input_files("#upload-form input[type=file]", str(data))
        page.click("#upload-form button")
        expect(page.locator(".messages")).to_contain_text("version 1: uploaded 16 conversations from games.jsonl")
        expect(page.locator("#preview .dataset-row")).to_have_count(16)
        expect(page.locator("#preview .msg.role-assistant").first).to_contain_text("<move>")

        page.click("#teach-link")
        expect(page.locator("#id_kind_1")).to_be_checked()  # Teach (SFT), from the dataset's page
        expect(page.locator("#id_group_size")).to_be_hidden()  # GRPO's fields are put away
        expect(page.locator("#id_epochs")).to_be_visible()
        page.fill("#id_name", "teach")
        page.fill("#id_epochs", "2")
        page.fill("#id_batch_tokens", "500")
        page.fill("#id_micro_batch_tokens", "500")
        page.fill("#id_sft_learning_rate", "0.005")
        page.fill("#id_held_out_fraction", "0.25")
        page.click("#launch")
        expect(page.locator("#run-kind")).to_have_text("Teach (SFT)")
        page.evaluate("window.__sameDocument = true")
        # The loss curves grow while it trains (the held-out one starts at step 0, before any step).
        page.wait_for_function("() => Number(document.getElementById('loss-chart').dataset.heldOut) >= 1",
                               timeout=180_000)
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=300_000)
        page.wait_for_function("() => Number(document.getElementById('loss-chart').dataset.heldOut) >= 2")
        assert page.evaluate("window.__sameDocument") is True  # every point arrived live, no reload
        # The step table is a fetch of its own, sent on each step's event: it may land after "Completed" does.
        steps, points = live_settled(page, lambda: (page.locator("#step-table tbody tr").count(),
                                                    int(page.get_attribute("#loss-chart", "data-points"))))
        assert steps >= 2 and points == steps
        page.screenshot(path=str(SHOTS / "sft-run.png"), full_page=True)

        page.click(f"#reinforce-{steps}")  # the last step's checkpoint (the ORM waits until the browser is done)
        expect(page.locator("h1")).to_contain_text(f"Reinforce from teach step {steps} (GRPO)")
        page.fill("#id_steps", "1")
        page.click("button:has-text('Save')")
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=300_000)
        expect(page.locator("#run-header")).to_contain_text("forked from teach")
        assert csp_violations == []
        browser.close()

    teach = Run.objects.get(name="teach")
    assert teach.status == RunStatus.COMPLETED and teach.steps.count() == steps
    last = teach.checkpoints.order_by("-step_index").first()
    assert last.step_index == steps
    child = Run.objects.exclude(pk=teach.pk).get()
    assert child.kind == "grpo" and child.status == RunStatus.COMPLETED and child.parent_checkpoint == last
    assert child.config["init_checkpoint"] == last.path
    # Its first step rolled out with the SFT adapter, served under the fork's step-0 name, not the base model.
    assert child.steps.get(index=1).metrics["rollout_model"] == f"{child.config['name']}@0"
