"""What a person sees live equals what a reload, the API and the export say (Debian chromium via Playwright,
headless): a run on the tiny model with the judge double, watched live through an override, a pause that
parks the run, a resume from its checkpoint and the end; and the launch form's warning after Back.
Screenshots go to var/screenshots/."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.webapp.conftest import wait_for
from tests.webapp.factories import TEST_TINY_MODEL, agent_factory, project_factory, run_factory, scenario_set_factory
from tests.webapp.browser import SHOTS, launch_chromium, live_settled, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from webapp.models import Agent, Run, RunStatus, Scenario, ScenarioSet
from webapp.services.catalogue import judge_config_create, rubric_create

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

# Everything the run page shows, read from the DOM: the header, the step table, both checkpoint lists and each
# group card (its header, and per trajectory every column by its class). A function, not a string: the page's
# CSP forbids evaluating strings.
READ_PAGE = """() => {
  const text = (el) => (el ? el.textContent.replace(/\\s+/g, " ").trim() : null);
  const cards = {};
  for (const card of document.querySelectorAll("#groups .group")) {
    const rows = {};
    for (const row of card.querySelectorAll("tr.trajectory")) {
      const cells = {};
      for (const cell of row.querySelectorAll("td")) cells[cell.className.split(" ").pop() || "col"] = text(cell);
      rows[row.dataset.label] = cells;
    }
    cards[card.id] = {step: Number(card.dataset.step), index: Number(card.dataset.index),
                      header: text(card.querySelector("header")), rows: rows};
  }
  return {status: text(document.getElementById("run-status")), progress: text(document.getElementById("run-progress")),
          phase: text(document.getElementById("run-phase")),
          steps: Array.from(document.querySelectorAll("#step-table tbody tr")).map(text),
          checkpoints: text(document.getElementById("checkpoints")),
          checkpointTable: text(document.getElementById("checkpoint-table")),
          order: Array.from(document.querySelectorAll("#groups .group")).map((g) => g.id), cards: cards};
}"""


def _num(value) -> str:
    """The pages' number format (templatetags/studio.py `num`)."""
    return "—" if value is None else f"{float(value):.3f}"


# How each trajectory column of a card reads in the API's group listing. To compare another field, add it here
# (and to EXPORT_FIELDS).
API_FIELDS = {
    "rank": lambda t: str(t["rank"]),
    "judge": lambda t: _num(t["judge_score"]),
    "human": lambda t: _num(t["override_score"]),
    "effective": lambda t: _num(t["effective_reward"]),
    "trained": lambda t: _num(t["review"]["trained_reward"]) if t["review"]["trained"] else "not yet",
    "advantage": lambda t: _num(t["advantage"]),
}
# The same for the `review` block of a trajectory in the JSONL export: its key → the card's column.
EXPORT_FIELDS = {
    "rank": "rank", "judge_score": "judge", "human_score": "human", "reward": "effective",
    "trained_reward": "trained", "advantage": "advantage",
}


def _api_view(page, server: str, run_id: int) -> dict:
    run = page.request.get(f"{server}/api/runs/{run_id}/").json()
    groups = page.request.get(f"{server}/api/runs/{run_id}/groups/?limit=1000").json()["results"]
    steps = page.request.get(f"{server}/api/runs/{run_id}/steps/?limit=1000").json()["results"]
    checkpoints = page.request.get(f"{server}/api/runs/{run_id}/checkpoints/?limit=1000").json()["results"]
    return {"run": run, "groups": groups, "steps": steps, "checkpoints": checkpoints}


def _export_lines(page, server: str, run_id: int) -> list[dict]:
    response = page.request.get(f"{server}/runs/{run_id}/export.jsonl")
    assert response.ok
    return [json.loads(line) for line in response.text().splitlines() if line.strip()]


def _assert_page_matches_api_and_export(shown: dict, api: dict, export: list[dict]) -> None:
    run = api["run"]
    assert shown["status"] == run["status"].replace("_", " ").capitalize()
    assert shown["progress"] == f"{run['steps_done']} / {run['total_steps']}"
    assert [row.split(" ")[0] for row in shown["steps"]] == [str(s["index"]) for s in
                                                            sorted(api["steps"], key=lambda s: s["index"])]
    for s in api["steps"]:
        row = next(r for r in shown["steps"] if r.split(" ")[0] == str(s["index"]))
        assert row.split(" ")[1] == _num(s["metrics"].get("reward_mean")), (row, s)
    for c in api["checkpoints"]:
        assert f"step {c['step_index']} · {c['adapter_name']}" in shown["checkpoints"]
        assert f"step {c['step_index']} · {c['adapter_name']}" in shown["checkpointTable"]
    assert len(api["checkpoints"]) == shown["checkpoints"].count("download adapter")

    # The same groups, in the same order, with every column of every trajectory as the API says.
    assert shown["order"] == [f"group-{g['id']}" for g in api["groups"]]
    for g in api["groups"]:
        card = shown["cards"][f"group-{g['id']}"]
        assert (card["step"], card["index"]) == (g["step_index"], g["index"])
        assert set(card["rows"]) == {t["label"] for t in g["trajectories"]}
        for t in g["trajectories"]:
            for column, read in API_FIELDS.items():
                assert card["rows"][t["label"]][column] == read(t), (g["id"], t["label"], column)

    # The export: one line per group, named by step, group and scenario, with the labels the pages use.
    by_place = {(c["step"], c["index"]): c for c in shown["cards"].values()}
    assert len(export) == len(by_place)
    compared = 0
    for line in export:
        _, step, group, _ = line["id"].rsplit("/", 3)
        card = by_place[(int(step.removeprefix("step")), int(group.removeprefix("group")) - 1)]
        assert {t["id"] for t in line["trajectories"]} == set(card["rows"])
        for t in line["trajectories"]:
            shown_row = card["rows"][t["id"]]
            for key, column in EXPORT_FIELDS.items():
                value = t["review"][key]
                if key == "rank":
                    assert shown_row[column] == str(value), (line["id"], t["id"], key)
                elif key == "trained_reward" and value is None:  # not trained yet, or a failed answer
                    assert shown_row[column] in ("not yet", "—"), (line["id"], t["id"], key)
                else:
                    assert shown_row[column] == _num(value), (line["id"], t["id"], key)
                compared += 1
    assert compared == len(EXPORT_FIELDS) * sum(len(line["trajectories"]) for line in export) > 0


def _tiny_project(tiny_model_dir: Path):
    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE

    project = project_factory(name="Truth project")
    Agent.objects.create(project=project, name="2048 player", base_model=TEST_TINY_MODEL,
                         system_prompt=DEMO_SYSTEM_PROMPT, environment_kind="game_2048",
                         environment_options={"winning_tile": 64, "max_turns": 2}, max_tokens=12)
    games = ScenarioSet.objects.create(project=project, name="2048 games")
    Scenario.objects.bulk_create(Scenario(scenario_set=games, external_id=f"game-{k}", user_message=DEMO_USER_MESSAGE,
                                          metadata={"seed": 1000 + k}) for k in range(2))
    rubric_create(user=project.owner, project=project, name="good moves", text="Prefer a legal move, nothing else.")
    return project


def test_the_live_run_page_equals_the_reloaded_page_the_api_and_the_export_through_an_override_and_a_resume(
        server, tiny_model_dir):  # noqa: F811
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = _tiny_project(tiny_model_dir)
    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as judge, launch_chromium() as browser:
        judge_config_create(user=project.owner, project=project, name="double", model=judge.model,
                            api_base=judge.api_base, api_key="test")
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        failed: list[str] = []  # every response of 400 or more the live page got (a stale group's 404, a 405)
        page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.request.method} {r.url}"))
        log_in(page, server, project.owner.username)

        page.goto(f"{server}/projects/{project.id}/runs/new/")
        page.fill("#id_name", "truth-run")
        page.select_option("#id_rubric", label="good moves")
        page.select_option("#id_judge_config", label="double (openai/judge)")
        # 8 steps: under a loaded CI machine the live page can trail the engine by a few steps, and the pause
        # below must land before the run ends (with 4, the run once completed under the pause).
        page.fill("#id_steps", "8")
        page.fill("#id_group_size", "2")
        page.fill("#id_learning_rate", "0.002")
        page.fill("#id_overrides", '{"grpo": {"epochs_per_step": 1}}')  # a training setting; the CPU is the deployment's
        page.click("#launch")
        expect(page.locator("#run-status")).to_have_text("Running", timeout=60_000)
        run = Run.objects.get(name="truth-run")
        page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page

        # Step 1 streams in and trains; its checkpoint shows in both lists without a reload.
        expect(page.locator("#step-table tbody tr#step-1")).to_have_count(1, timeout=180_000)
        expect(page.locator("#checkpoints")).to_contain_text("step 1", timeout=60_000)
        expect(page.locator("#checkpoint-table")).to_contain_text("step 1")

        # Pause at once (seven steps are left); a queued run makes the worker park it (its engine stops).
        page.click("#pause")
        expect(page.locator("#run-status")).to_have_text(re.compile(r"^Paus(ing|ed)$"))  # "Pausing" until the engine holds
        waiting = run_factory(project=project, name="waiting", status=RunStatus.QUEUED)
        expect(page.locator("#run-phase")).to_contain_text("resume continues from the step", timeout=60_000)
        page.screenshot(path=str(SHOTS / "live-truth-parked.png"), full_page=True)
        # The freed worker takes the waiting run at once, without a message of its own (launch order, issue 34.7);
        # it ends quickly (its agent's model is not on this worker), and the worker is free for the resume.
        wait_for(lambda: Run.objects.get(pk=waiting.pk).status not in (RunStatus.QUEUED, RunStatus.RUNNING),
                 timeout=120, message="the waiting run to run on the freed worker")

        # Meanwhile a person overrides a step-1 score in another tab: the live card follows.
        # (a scored answer: one whose rollout failed has no reward to override, and the page says so)
        scored = [t for g in run.groups.filter(step_index=1).order_by("index") for t in g.trajectories.all()
                  if t.reward is not None]
        assert scored, list(run.groups.filter(step_index=1).values("errors", "scoring_error"))
        target = scored[-1]
        group = target.group
        review = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(review, server, project.owner.username)
        review.goto(f"{server}/groups/{group.id}/")
        column = review.locator(f"#col-{target.id}")
        column.locator("input[name=score]").fill("0")
        column.locator("input[name=reason]").fill("an illegal move")
        column.locator(".override-form button").click()
        expect(review.locator(".messages")).to_contain_text("score overridden")
        review.close()
        expect(page.locator(f"#group-{group.id} .human").filter(has_text="0.000")).to_have_count(1)

        # Resume continues from the last checkpoint and redoes the interrupted step: its new groups replace the old.
        page.click("#resume")
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=300_000)
        page.wait_for_function("() => Number(document.getElementById('reward-chart').dataset.points) >= 8")
        live = live_settled(page, lambda: page.evaluate(READ_PAGE))
        assert page.evaluate("window.__sameDocument") is True
        page.screenshot(path=str(SHOTS / "live-truth-after-resume.png"), full_page=True)

        page.reload()
        reloaded = page.evaluate(READ_PAGE)
        assert live == reloaded
        _assert_page_matches_api_and_export(live, _api_view(page, server, run.id), _export_lines(page, server, run.id))
        assert failed == [], failed
        assert run.events.filter(kind="run_started", payload__resumed=True).exists()
        assert len(live["cards"]) == 16 and len(live["steps"]) == 8
        browser.close()


@pytest.fixture
def scripted_server(scripted_app_server) -> str:
    """The served app with launches on the scripted engine (no model): for pages, not training."""
    return scripted_app_server.url


def test_back_then_launch_warns_of_the_identical_run_and_links_it(scripted_server):
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Back project")
    agent_factory(project=project, name="player", environment_kind="game_2048")
    scenario_set_factory(project=project, name="games")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, scripted_server, project.owner.username)
        page.goto(f"{scripted_server}/projects/{project.id}/runs/new/")
        page.fill("#id_name", "once")
        page.fill("#id_steps", "2")
        page.click("#launch")
        expect(page.locator("#run-status")).to_be_visible()
        first = Run.objects.get(project=project)

        page.go_back()  # the browser's own Back: the form again, refilled
        expect(page.locator("#launch")).to_be_visible()
        page.click("#launch")
        expect(page.locator("#duplicate-warning")).to_contain_text("You launched an identical run")
        assert Run.objects.filter(project=project).count() == 1
        page.screenshot(path=str(SHOTS / "launch-duplicate-warning.png"), full_page=True)

        assert page.get_attribute("#duplicate-link", "href") == f"/runs/{first.id}/"
        page.click("#launch-anyway")
        expect(page.locator("#run-status")).to_be_visible()
        assert Run.objects.filter(project=project).count() == 2
        browser.close()
