"""Issue 34 in a real browser (headless Debian chromium via Playwright), on daphne with the embedded executor and
the scripted engine: a human score given while a run is parked survives its resume (item 1) and the worker hands
itself to the waiting run at once (item 7); queued runs start in launch order (7); the review queue pages
through everything and says what it flags (6); and the smaller truths of item 8. Screenshots go to
var/screenshots/."""
from __future__ import annotations

import re

import pytest

from tests.judge_double import JudgeDouble
from tests.webapp.conftest import wait_for
from tests.webapp.factories import (agent_factory, judge_factory, member_factory, project_factory, run_factory,
                                    scenario_set_factory, user_factory)
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser_live_truth import scripted_server  # noqa: F401 - the daphne fixture
from tests.webapp.test_review import _group
from webapp.models import Role, Run, RunStatus, ScoreOverride, TrajectoryGroup
from webapp.models.runs import PARKED

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]


def _launch_in_page(page, server: str, project, name: str, steps: int, agent) -> Run:
    page.goto(f"{server}/projects/{project.id}/runs/new/")
    page.select_option("#id_agent", str(agent.id))
    page.fill("#id_name", name)
    page.fill("#id_steps", str(steps))
    page.fill("#id_group_size", "2")
    page.click("#launch")
    page.wait_for_url("**/runs/*/")
    return Run.objects.get(project=project, name=name)


def test_a_human_score_given_while_a_run_is_parked_survives_its_resume_on_every_page_and_the_api(
        scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Park project")
    reviewer = member_factory(project=project, role=Role.REVIEWER)
    slow = agent_factory(project=project, name="slow", environment_options={"exact_match": True, "phase_s": 1.5,
                                                                             "review": True})
    scenario_set_factory(project=project, name="tasks")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        run = _launch_in_page(page, server, project, "parked-run", steps=3, agent=slow)

        # Step 1's first group is scored; the person pauses, and a run launched meanwhile waits for the worker.
        wait_for(lambda: TrajectoryGroup.objects.filter(run=run, step_index=1).exists(), timeout=60,
                 message="step 1's first group")
        page.click("#pause")
        expect(page.locator("#run-status")).to_have_text(re.compile(r"^Paus(ing|ed)$"))  # "Pausing" until the engine holds
        waiting = run_factory(project=project, name="waiting", status=RunStatus.QUEUED, steps=1,
                              agent=agent_factory(project=project, environment_options={"exact_match": True}))
        wait_for(lambda: Run.objects.get(pk=run.pk).worker == PARKED, timeout=60, message="the run to be parked")
        # The worker takes the waiting run at once (no message was sent for it: the slot looks for it).
        wait_for(lambda: Run.objects.get(pk=waiting.pk).status == RunStatus.COMPLETED, timeout=30,
                 message="the waiting run to run on the freed worker")

        # While parked, a reviewer overrides answer B of step 1, group 1: the step has not trained.
        group = TrajectoryGroup.objects.get(run=run, step_index=1, index=0)
        target = group.trajectories.get(index=1)
        review = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(review, server, reviewer.username)
        review.goto(f"{server}/groups/{group.id}/")
        column = review.locator(f"#col-{target.id}")
        expect(column.locator(".trained")).to_contain_text("not trained yet")
        column.locator("input[name=score]").fill("0.95")
        column.locator("input[name=reason]").fill("B is the better answer")
        column.locator(".override-form button").click()
        expect(review.locator(".messages")).to_contain_text("score overridden")
        # Told before resuming: on the group page and on the run page.
        expect(review.locator("#pending-overrides")).to_contain_text("1 human score on step 1 has not trained yet")
        page.reload()
        notice = page.locator("#pending-overrides")
        expect(notice).to_contain_text("This run is parked")
        expect(notice).to_contain_text("Resume rolls that step out again")
        page.screenshot(path=str(SHOTS / "truth-review-parked-pending.png"), full_page=True)

        # Resume asks first (the pending score may not train as given); the person goes on.
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#resume")
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=120_000)

        # The redo gave answer B again: the human score was carried to it and trained.
        new_group = TrajectoryGroup.objects.get(run=run, step_index=1, index=0)
        assert new_group.pk != group.pk
        carried = new_group.trajectories.get(index=1)
        assert carried.override_score == 0.95
        review.goto(f"{server}/groups/{new_group.id}/")
        column = review.locator(f"#col-{carried.id}")
        expect(column.locator(".human")).to_contain_text("0.950")
        expect(column.locator(".trained")).to_contain_text("0.950")
        expect(review.locator("#redo-overrides")).to_contain_text("carried from the earlier rollout")
        review.screenshot(path=str(SHOTS / "truth-review-carried-group.png"), full_page=True)
        assert review.goto(f"{server}/groups/{group.id}/").status == 404  # the replaced group is gone

        review.goto(f"{server}/runs/{run.id}/review/")
        audit = review.locator("#audit tbody tr")
        expect(audit).to_have_count(2)
        expect(audit.nth(0)).to_contain_text("changed the step's rewards")  # the carried row: it trained
        expect(audit.nth(1)).to_contain_text("carried to step 1's redo")  # the row of the replaced group
        expect(audit.nth(1)).not_to_contain_text("changed the step's rewards")

        rows = review.request.get(f"{server}/api/runs/{run.id}/overrides/").json()["results"]
        assert not [r for r in rows if r["trajectory"] is None and r["group"] is None and r["applies_to_training"]]
        assert [(r["kind"], r["trajectory"], r["applies_to_training"], r["redo"]) for r in rows] == [
            ("carried", carried.id, True, ""), ("score", None, False, "carried")]
        api_group = review.request.get(f"{server}/api/runs/{run.id}/groups/?limit=100").json()["results"]
        step1 = next(g for g in api_group if g["step_index"] == 1 and g["index"] == 0)
        b = next(t for t in step1["trajectories"] if t["id"] == carried.id)
        assert (b["override_score"], b["review"]["trained"], b["review"]["trained_reward"]) == (0.95, True, 0.95)
        assert ScoreOverride.objects.filter(run=run).count() == 2
        browser.close()


def test_queued_runs_start_in_launch_order_whichever_launch_woke_the_worker(scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    project = project_factory(name="Queue project")
    quick = agent_factory(project=project, name="quick", environment_options={"exact_match": True})
    scenario_set_factory(project=project, name="tasks")
    # Launched first; its message never reached this worker (a broker restart, another web process).
    first = run_factory(project=project, name="launched-first", status=RunStatus.QUEUED, steps=1,
                        agent=agent_factory(project=project, environment_options={"exact_match": True}))
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        second = _launch_in_page(page, server, project, "launched-second", steps=1, agent=quick)
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=60_000)
        page.goto(f"{server}/runs/{first.id}/")
        expect(page.locator("#run-status")).to_have_text("Completed", timeout=30_000)
        first, second = Run.objects.get(pk=first.pk), Run.objects.get(pk=second.pk)
        assert first.started_at < second.started_at
        browser.close()


def test_the_review_queue_pages_through_every_flagged_group_and_says_how_many_and_why(
        scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    run = run_factory(status=RunStatus.RUNNING, name="queue-run")
    spread = {"disagreement": 0.2, "passes": 2}
    for step in range(1, 31):
        _group(run, step=step, index=0, scores=[0.9, 0.3, 0.1], judge_meta=spread)
        _group(run, step=step, index=1, scores=[0.9, 0.5, 0.1], explanations=["", "", "Correct and complete."])
        _group(run, step=step, index=2, scores=[0.6, 0.59, 0.1])  # a near-tie only
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(page, server, run.project.owner.username)
        page.goto(f"{server}/runs/{run.id}/review/")
        summary = page.locator("#queue-summary")
        expect(summary).to_contain_text("60 of 90 groups flagged")
        expect(summary).to_contain_text("judge passes disagree 30")
        expect(summary).to_contain_text("explanation contradicts the score 30")
        expect(page.locator("#review-queue tbody tr")).to_have_count(50)
        page.click("#queue-next")
        expect(page.locator("#review-queue tbody tr")).to_have_count(10)
        expect(page.locator("#queue-pager")).to_contain_text("page 2 of 2")
        page.screenshot(path=str(SHOTS / "truth-review-queue-page-2.png"), full_page=True)
        browser.close()


def test_the_smaller_truths_of_the_launch_run_generator_and_websocket(scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    project = project_factory(name="Small project")
    player = agent_factory(project=project, name="player", environment_options={"exact_match": True})
    scenario_set = scenario_set_factory(project=project, name="games")
    stranger = user_factory()
    held_out = run_factory(project=project, name="with-evaluation", status=RunStatus.RUNNING, steps=4,
                           overrides={"evaluation": {"held_out_fraction": 0.5, "every": 2}})
    with JudgeDouble() as double, launch_chromium() as browser:
        judge_factory(project=project, name="a unreachable", model="openai/judge", api_key_env="TR_NOT_SET_ANYWHERE")
        working = judge_factory(project=project, name="b answers", model=double.model, api_base=double.api_base)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.set_default_timeout(30_000)
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        log_in(page, server, project.owner.username)

        # The launch page's inline validation swaps only slots the page has (no oobErrorNoTarget).
        page.goto(f"{server}/projects/{project.id}/runs/new/")
        page.select_option("#id_agent", str(player.id))
        page.fill("#id_name", "twice")
        page.fill("#id_steps", "1")
        page.fill("#id_group_size", "2")
        page.locator("#id_steps").dispatch_event("change")
        page.wait_for_timeout(1500)  # the validation request answers and is swapped in
        assert not [m for m in console if "oobErrorNoTarget" in m], console
        page.click("#launch")
        page.wait_for_url("**/runs/*/")

        # Back, Launch again: the duplicate warning is in view at the top and has the focus.
        page.go_back()
        expect(page.locator("#launch")).to_be_visible()
        page.click("#launch")
        warning = page.locator("#duplicate-warning")
        expect(warning).to_contain_text("You launched an identical run")
        expect(warning).to_be_focused()
        box = warning.bounding_box()
        assert box is not None and -1 <= box["y"] and box["y"] + box["height"] <= 800, box  # in view, whole
        page.screenshot(path=str(SHOTS / "truth-review-duplicate-warning.png"))

        # A run with held-out scenarios says its evaluation is pending, not that it has none.
        page.goto(f"{server}/runs/{held_out.id}/")
        expect(page.locator("#eval-pending")).to_contain_text("Held-out evaluation pending")
        expect(page.get_by_text("Give the run an evaluation section")).to_have_count(0)

        # The generator preselects the judge that can answer, not the first by name.
        page.goto(f"{server}/scenario-sets/{scenario_set.id}/generate/")
        expect(page.locator("#judge")).to_have_value(str(working.id))

        # A non-member's socket is closed with 4404, the code the docs promise (not a refused handshake).
        other = browser.new_page()
        log_in(other, server, stranger.username)
        other.goto(f"{server}/")
        code = other.evaluate("""(path) => new Promise((resolve) => {
            const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + path);
            ws.onclose = (e) => resolve(e.code);
        })""", f"/ws/runs/{held_out.id}/")
        assert code == 4404
        browser.close()
