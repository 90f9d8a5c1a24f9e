"""Issue 48 items 3, 4 and 8 as a person meets them in a real browser (Debian chromium via Playwright, headless), on
the shared daphne with the embedded executor: model cards of an SFT run, of a GRPO run forked from its checkpoint
and of a plain GRPO run, exported from the run pages (three tabs left open while the worker merges, each card read
from the downloaded zip, the same after a reload); an SFT upload whose conversation is longer than the model's
context refused by its line while a second tab's good upload is stored, the preview's range right on every page;
and the words of the first hour (a Pause that meets a run already at its review, the tokens page's served
checkpoints, the agent form's prompt budget). Runs and datasets are made with factories where the pages only read
them. Item 7 (`manage.py studio_demo`) is a command, not a page: tests/webapp/test_demo_start.py.
Screenshots go to var/screenshots/."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from django.utils import timezone

from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.factories import (
    TEST_TINY_MODEL, agent_factory, conversation_rows, dataset_factory, judge_factory, mcp_server_factory,
    project_factory, rubric_factory, run_factory, scenario_set_factory,
)
from tests.webapp.serving_world import RECIPE, lora_adapters  # noqa: F401 - real adapters of the tiny model
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from tests.webapp.test_browser_whole_truth import model_check_at_launch  # noqa: F401 - the agent form's budget
from training.sft.data import conversation_parse, split_held_out
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Run, RunStatus, Scenario
from webapp.models.datasets import DatasetVersion
from webapp.models.runs import PARKED
from webapp.services.run_config import run_config_build
from webapp.services.sft_runs import sft_run_config

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

LORA = {"lora": {"r": RECIPE["r"], "alpha": RECIPE["lora_alpha"]}}  # the shape of the adapters the runs point at
LONG_ANSWER = " ".join(f"fjord{i} is a long narrow inlet" for i in range(400))  # thousands of tokens


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _chat(answer: str) -> dict:
    return {"messages": [{"role": "user", "content": "Tell me about fjords."},
                         {"role": "assistant", "content": answer}]}


# -- item 3: model cards ------------------------------------------------------------------------------------------

def _sft_run(*, project, agent, scenario_set, dataset, name: str) -> Run:
    """An SFT run as run_launch makes one (its config from the same two services), not sent to any worker."""
    version = dataset.versions.get()
    config = run_config_build(name=name, agent=agent, scenario_set=scenario_set, rubric_version=None, judge=None,
                              steps=10, group_size=4, groups_per_step=2, learning_rate=1e-5, overrides=LORA,
                              kind="sft")
    config = sft_run_config(config=config, project=project, dataset_version=version,
                            sft={"epochs": 1, "held_out_fraction": 0.3})
    return Run.objects.create(project=project, name=name, agent=agent, scenario_set=scenario_set, config=config,
                              dataset_version=version, total_steps=0)


def _forked_run(*, checkpoint: Checkpoint, name: str) -> Run:
    """A GRPO run from `checkpoint` as run_fork makes one: the parent's model, prompt and environment, its adapter."""
    parent = checkpoint.run
    config = run_config_build(name=name, agent=parent.agent, scenario_set=parent.scenario_set, rubric_version=None,
                              judge=None, steps=3, group_size=4, groups_per_step=2, learning_rate=1e-5,
                              parent=checkpoint)
    return Run.objects.create(project=parent.project, name=name, agent=parent.agent, scenario_set=parent.scenario_set,
                              config=config, total_steps=3, parent_checkpoint=checkpoint, parent_run=parent)


def _trained(run: Run, *, adapter: Path, step: int, events: tuple[dict, ...] = ()) -> Checkpoint:
    """The engine's events up to a checkpoint at `step` (a real adapter, so the worker can merge it), ingested."""
    Run.objects.filter(pk=run.id).update(status=RunStatus.RUNNING)
    for event in [{"kind": "run_started", "run_name": run.name, "start_step": 1, "total_steps": step,
                   "resumed": False}, *events,
                  {"kind": "checkpoint_saved", "step": step, "path": str(adapter),
                   "adapter_name": f"{run.name}@{step}"},
                  {"kind": "run_finished", "status": "completed", "steps_done": step}]:
        run_event_ingest(run_id=run.id, event=event)
    return Checkpoint.objects.get(run=run, step_index=step)


def _card_rows(card: str) -> dict[str, str]:
    """The card's table, by the name in its first column."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| ([^|]+?) \| (.*) \|$", card, re.M)}


def _download_card(tab) -> str:
    with tab.expect_download() as info:
        tab.click("#export-download")
    return zipfile.ZipFile(info.value.path()).read("README.md").decode()


def test_three_model_cards_exported_from_their_run_pages_say_what_each_run_did_and_a_reload_says_the_same(
        server, tiny_model_dir, lora_adapters):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory(name="Cards project")
    agent = agent_factory(project=project, base_model=TEST_TINY_MODEL, environment_kind="game_2048")
    scenario_set = scenario_set_factory(project=project, scenarios=3, name="moves")
    Scenario.objects.create(scenario_set=scenario_set, external_id="v1", user_message="Held out?",
                            split=Scenario.Split.VALIDATION)
    dataset = dataset_factory(project=project, rows=10, name="fjords")
    teach = _sft_run(project=project, agent=agent, scenario_set=scenario_set, dataset=dataset, name="teach")
    train, held_out = split_held_out([conversation_parse(row)[0] for row in conversation_rows(10)],
                                     teach.config["sft"]["held_out_fraction"], teach.config["seed"])
    train_n, held_n = len(train), len(held_out)  # the engine's own split of the version's conversations
    assert held_n > 0 and train_n + held_n == 10
    teach_checkpoint = _trained(teach, adapter=lora_adapters[0], step=2, events=(
        {"kind": "held_out_loss", "step": 0, "loss": 2.5, "tokens": 40, "conversations": held_n},
        {"kind": "held_out_loss", "step": 2, "loss": 2.0, "tokens": 40, "conversations": held_n}))
    reinforce = _forked_run(checkpoint=teach_checkpoint, name="teach-rl")
    _trained(reinforce, adapter=lora_adapters[1], step=3)
    judge = judge_factory(project=project, model="openai/card-judge")
    rubric = rubric_factory(project=project, text="Prefer legal moves.").latest_version
    plain = run_factory(project=project, agent=agent, scenario_set=scenario_set, judge_config=judge,
                        rubric_version=rubric, name="plain", overrides=LORA)
    _trained(plain, adapter=lora_adapters[2], step=2)
    runs = (teach, reinforce, plain)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        context.set_default_timeout(30_000)
        tabs = [context.new_page() for _ in runs]
        log_in(tabs[0], server, project.owner.username)
        headers = {}
        for tab, run in zip(tabs, runs):  # each export asked from its run page, in a tab of its own
            tab.goto(f"{server}/runs/{run.id}/")
            headers[run.id] = tab.locator("#run-header").inner_text()
            tab.locator("#checkpoint-table button.export-merged").click()
            tab.wait_for_url(re.compile(r"/exports/\d+/$"))
            tab.evaluate("window.__sameDocument = true")  # gone if anything reloads the page
        assert "Teach (SFT)" in headers[teach.id] and "fjords v1" in headers[teach.id]
        assert "forked from teach step 2" in headers[reinforce.id] and "Teach (SFT)" not in headers[reinforce.id]
        assert f"Scored by the judge {plain.config['judge']['judge_model']}" in headers[plain.id]

        cards = {}
        for tab, run in zip(tabs, runs):  # left open: each page says Done by itself (one worker merges in turn)
            expect(tab.locator("#export-state")).to_have_text("Done", timeout=240_000)
            assert tab.evaluate("window.__sameDocument") is True
            cards[run.id] = _download_card(tab)
        tabs[0].screenshot(path=str(SHOTS / "first-hour-items-export-done.png"), full_page=True)

        # The SFT run: its dataset version with the engine's split, its loss, no reward, no GRPO.
        card, rows = cards[teach.id], _card_rows(cards[teach.id])
        assert rows["kind"] == "SFT" and "GRPO" not in card and "judge: none" not in card
        assert teach.config["kind"] == "sft" and teach.config["sft"]["dataset"] == "fjords v1"
        assert rows["training data"] == (f"dataset “fjords” v1: {train_n} conversations trained on, {held_n} held "
                                         "out for the held-out loss")
        assert rows["objective"].startswith("cross-entropy on the assistant turns") and "reward" not in rows
        assert rows["held-out scenarios"] == "1 of scenario set “moves” (the held-out win rate; none trained on)"
        assert rows["held-out loss"] == f"2.0000 at step 2 on {held_n} conversations (2.5000 before training)"
        assert rows["started from"] == "the base model (a new adapter)"
        assert rows["checkpoint"] == "`teach@2` (step 2 of 2)"

        # The GRPO run forked from it: where it started, the scenario split its config holds, the game's reward.
        stored = Run.objects.get(pk=reinforce.pk).config
        held = stored["evaluation"]["held_out_ids"]
        card, rows = cards[reinforce.id], _card_rows(cards[reinforce.id])
        assert rows["kind"] == "SFT → GRPO" and "GRPO, starting from an SFT checkpoint" in card
        assert stored["init_checkpoint"] == str(lora_adapters[0])
        assert rows["started from"] == "`teach@2`: step 2 of run “teach” (SFT)"
        assert (len(stored["scenarios"]) - len(held), len(held)) == (3, 1)
        assert rows["training data"] == "scenario set “moves”: 3 training scenarios, 1 held out"
        assert rows["reward"] == f"the environment's own reward (`{stored['environment']['kind']}`); no judge"

        # The plain GRPO run: its judge and rubric as the run froze them, from the base model.
        stored = Run.objects.get(pk=plain.pk).config
        card, rows = cards[plain.id], _card_rows(cards[plain.id])
        assert rows["kind"] == "GRPO" and "trained with GRPO by Rubric Studio" in card
        assert rows["reward"] == f"judge `{stored['judge']['judge_model']}` ranking each group against the rubric"
        assert rows["rubric"] == str(rubric) and "> Prefer legal moves." in card
        assert rows["training data"] == "scenario set “moves”: 3 training scenarios, 1 held out"
        assert rows["started from"] == "the base model (a new adapter)"

        # A reload of each export page, and Back to its run page: the same card, the same run.
        for tab, run in zip(tabs, runs):
            tab.reload()
            expect(tab.locator("#export-state")).to_have_text("Done")
            assert _download_card(tab) == cards[run.id]
            tab.go_back()
            expect(tab.locator("#run-header")).to_be_visible()
            assert tab.url == f"{server}/runs/{run.id}/"
            assert tab.locator("#run-header").inner_text() == headers[run.id]


# -- item 8: words ------------------------------------------------------------------------------------------------

def test_a_pause_clicked_on_a_page_still_showing_running_when_the_run_reached_its_review_is_refused_in_grammar(
        server):  # noqa: F811
    from playwright.sync_api import expect

    # Parked (no engine holds it): the reaper leaves it alone, and Cancel ends it at once.
    run = run_factory(status=RunStatus.RUNNING, worker=PARKED, steps_done=1, review_gate=True,
                      phase="step 2: rolling out")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, run.project.owner.username)
        page.goto(f"{server}/runs/{run.id}/")
        expect(page.locator("#run-status")).to_have_text("Running")
        # The run reaches its review gate; this page has not heard of it yet when the person clicks Pause.
        Run.objects.filter(pk=run.pk).update(status=RunStatus.AWAITING_REVIEW, phase="step 2: waiting for review")
        page.click("#pause")
        expect(page.locator("#control-error")).to_have_text("an awaiting review run cannot be paused")
        expect(page.locator("#run-status")).to_have_text("Awaiting review")
        expect(page.locator("#pause")).to_have_count(0)
        expect(page.locator("#approve")).to_be_visible()
        assert "a awaiting" not in page.locator("#run-header").inner_text()
        page.screenshot(path=str(SHOTS / "first-hour-items-pause-refused.png"), full_page=False)

        page.reload()
        expect(page.locator("#run-status")).to_have_text("Awaiting review")
        expect(page.locator("#control-error")).to_have_count(0)
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#cancel")
        expect(page.locator("#run-status")).to_have_text("Cancelled")
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_the_tokens_page_says_a_token_asks_the_served_checkpoints_and_the_address_it_gives_answers_to_the_key(
        server):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory(name="Token project")
    run = run_factory(project=project, status=RunStatus.COMPLETED, name="served")
    Checkpoint.objects.create(run=run, step_index=1, path=str(Path(run.output_dir) / "step_0001"),
                              adapter_name="served@1")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        page.goto(f"{server}/projects/{project.id}/")
        page.click("#tokens-link")
        uses = page.locator("#token-uses")
        expect(uses).to_contain_text("Served checkpoints: ask a trained checkpoint from any OpenAI-compatible client")
        expect(uses).to_contain_text("External rollouts")
        expect(uses).to_contain_text("<run>@<step>")
        base_url = page.locator("#served-base-url").inner_text()
        assert base_url == f"{server}/api/projects/{project.id}/openai/v1/"
        page.fill("#token-form input[name=name]", "my script")
        page.click("#token-form button.primary")
        key = page.locator("#new-token-key").inner_text().strip()
        assert key

        # The address and key as the page gives them, from a client with no session: the served checkpoints.
        outside = browser.new_context().request
        assert outside.get(base_url + "models").status in (401, 403)
        listed = outside.get(base_url + "models", headers={"Authorization": f"Bearer {key}"})
        assert listed.status == 200 and [m["id"] for m in listed.json()["data"]] == ["served@1"]

        page.goto(f"{server}/projects/{project.id}/tokens/")  # opened again: the key is not shown twice; it was used
        expect(page.locator("#new-token")).to_have_count(0)
        row = page.locator("#token-table tr", has_text="my script")
        expect(row).to_contain_text("active")
        expect(row).not_to_contain_text("never")


# -- item 4: SFT data checked against the model -------------------------------------------------------------------

def test_an_upload_longer_than_the_models_context_is_refused_by_its_line_and_a_second_tabs_good_upload_is_stored(
        model_check_at_launch, tiny_model_dir, server):  # noqa: F811
    """With the deployment's default model check, as the agent form's budget below: the daphne they share counts
    with the tiny model's tokenizer once loaded."""
    from playwright.sync_api import expect

    project = project_factory(name="Data project")
    agent_factory(project=project, base_model=TEST_TINY_MODEL)  # the model the upload form checks against
    dataset = dataset_factory(project=project, rows=21, name="fjords")
    url = f"{server}/datasets/{dataset.id}/"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(30_000)
        page = context.new_page()
        log_in(page, server, project.owner.username)
        page.goto(url)
        expect(page.locator("#preview-range")).to_have_text("v1: conversations 1–20 of 21")
        other = context.new_page()  # a second tab on the same dataset, opened before the refused upload
        other.goto(url)
        assert page.locator("#id_model").input_value() == TEST_TINY_MODEL  # the project's agent's model

        page.set_input_files("#id_file", files=[{"name": "chats.jsonl", "mimeType": "application/jsonl",
                                                 "buffer": _jsonl([_chat("A long narrow inlet."),
                                                                   _chat(LONG_ANSWER)])}])
        page.click("#upload-form button.primary")
        refusal = page.locator("#err-file")
        expect(refusal).to_contain_text("chats.jsonl: line 2: the conversation is", timeout=60_000)  # tokenizer load
        said = refusal.inner_text()
        tokens = re.search(r"line 2: the conversation is ([\d,]+) tokens, more than the 1,024-token context of "
                           rf"{TEST_TINY_MODEL}; shorten it or split it into shorter conversations", said)
        assert tokens and int(tokens.group(1).replace(",", "")) > 1024, said
        assert "line 1:" not in said and "micro_batch_tokens" not in said
        refusal.scroll_into_view_if_needed()  # below the preview: where the person sees it
        page.screenshot(path=str(SHOTS / "first-hour-items-upload-refused.png"))
        assert DatasetVersion.objects.filter(dataset=dataset).count() == 1
        page.goto(url)  # the page opened again: nothing was stored
        expect(page.locator("#versions tbody tr")).to_have_count(1)
        expect(page.locator("#preview-range")).to_have_text("v1: conversations 1–20 of 21")

        other.set_input_files("#id_file", files=[{"name": "good.jsonl", "mimeType": "application/jsonl",
                                                  "buffer": _jsonl([_chat("A long narrow inlet."),
                                                                    _chat("Carved by glaciers.")])}])
        other.click("#upload-form button.primary")
        expect(other.locator(".messages")).to_contain_text(
            f"version 2: appended 2 conversations from good.jsonl (each within the 1,024-token context of "
            f"{TEST_TINY_MODEL})")
        expect(other.locator("#preview-range")).to_have_text("v2: conversations 1–20 of 23")
        other.click("#next-page")
        expect(other.locator("#preview-range")).to_have_text("v2: conversations 21–23 of 23")
        expect(other.locator("#row-22")).to_contain_text("line 2 of good.jsonl")
        expect(other.locator("#row-22")).to_contain_text("Carved by glaciers.")
        other.go_back()
        expect(other.locator("#preview-range")).to_have_text("v2: conversations 1–20 of 23")

        page.reload()  # the first tab, reloaded: the second tab's version, and only it, is there
        expect(page.locator("#versions tbody tr")).to_have_count(2)
        expect(page.locator("#preview-range")).to_have_text("v2: conversations 1–20 of 23")
    assert list(DatasetVersion.objects.filter(dataset=dataset).values_list("number", "row_count")
                .order_by("number")) == [(1, 21), (2, 23)]


# -- item 8, continued: the prompt budget (after item 4, on the daphne that counts with the model check on) --------

def test_the_agent_forms_budget_says_the_system_prompt_takes_and_with_one_tool_take_and_the_saved_agent_the_same(
        model_check_at_launch, tiny_model_dir, server):  # noqa: F811
    from playwright.sync_api import expect

    project = project_factory(name="Budget project")
    tool = {"type": "function", "function": {"name": "read_mail", "description": "Reads a folder.",
                                             "parameters": {"type": "object", "properties": {}}}}
    mailbox = mcp_server_factory(project=project, name="mailbox", tools=[tool], tools_listed_at=timezone.now())
    alone = re.compile(r"^The system prompt takes (\d+) tokens; with max tokens 64, (\d+) of the model's 1024-token "
                       r"context, leaving (\d+) for a scenario\.$")
    with_tool = re.compile(r"^The system prompt and 1 tool take (\d+) tokens; with max tokens 64, ")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        page.goto(f"{server}/projects/{project.id}/agents/new/")
        expect(page.locator("#prompt-budget-pending")).to_be_visible()  # htmx listens to the form from here on
        page.fill("#id_name", "brief")
        page.select_option("#id_base_model", TEST_TINY_MODEL)
        page.fill("#id_system_prompt", "Answer in one line.")
        page.select_option("#id_environment_kind", "chat")
        page.fill("#id_max_tokens", "64")
        page.locator("#id_max_tokens").dispatch_event("change")
        numbers = page.locator("#prompt-budget-numbers")
        expect(numbers).to_have_text(alone, timeout=60_000)  # the first count may load the tokenizer
        frame, used, room = (int(n) for n in alone.match(numbers.inner_text()).groups())
        assert used == frame + 64 and room == 1024 - used

        page.select_option("#id_environment_kind", "mcp")
        page.select_option("#id_mcp_server", str(mailbox.pk))
        expect(numbers).to_have_text(with_tool)
        assert int(with_tool.match(numbers.inner_text()).group(1)) > frame  # the tool's description counts

        page.select_option("#id_environment_kind", "chat")
        expect(numbers).to_have_text(alone)
        assert int(alone.match(numbers.inner_text()).group(1)) == frame
        page.click("button[type=submit].primary")
        expect(page).to_have_url(f"{server}/projects/{project.id}/")

        page.goto(f"{server}/agents/{project.agents.get(name='brief').pk}/")  # the saved agent's own page
        expect(numbers).to_have_text(alone)
        assert int(alone.match(numbers.inner_text()).group(1)) == frame
