"""Issue 48 items 5 and 6 as a person meets them in a browser (Debian chromium via Playwright, headless), on the
shared daphne with the embedded executor and the scripted engine: review states from one source (a pause's
"Pausing" until the engine holds, live in two tabs; a Pause after Approve kept; a parked run's answer cards and
banner saying what Resume will do, live, on reload and in a second tab; a failed run's Resume asking first) and
defaults taken from context (the playground from a run, the generator's judge, the owner among the members).
Screenshots go to var/screenshots/."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.webapp.browser import SHOTS, launch_chromium, live_settled, log_in
from tests.webapp.conftest import run_story, wait_for
from tests.webapp.factories import (agent_factory, judge_factory, member_factory, project_factory, rubric_factory,
                                    run_factory, scenario_set_factory, user_factory)
from tests.webapp.test_browser_live_truth import scripted_server  # noqa: F401 - the daphne fixture
from tests.webapp.test_review import _group
from webapp.models import Project, Role, Run, RunStatus, TrajectoryGroup
from webapp.models.runs import PARKED
from webapp.services.review import trajectory_override

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

# Every text #run-status showed, in order, sampled every 20 ms: a header that said "Pausing" for a second and one
# that never did read the same once the run is paused. The header is swapped whole, so it is looked up each time.
WATCH_STATUS = """() => {
  window.__sameDocument = true;
  window.__statuses = [];
  setInterval(() => {
    const el = document.getElementById("run-status");
    const text = el ? el.textContent.trim() : null;
    if (text && window.__statuses[window.__statuses.length - 1] !== text) window.__statuses.push(text);
  }, 20);
}"""

# Per answer card of the run page: step → [(label, what the "Trained on" cell shows, the note it carries)].
READ_CARDS = """() => {
  const out = {};
  for (const row of document.querySelectorAll("#groups .group tr.trajectory")) {
    const card = row.closest(".group");
    const cell = row.querySelector("td.trained");
    (out[card.dataset.step] = out[card.dataset.step] || []).push(
      [card.dataset.index + row.dataset.label, cell.textContent.trim(), cell.getAttribute("title")]);
  }
  return out;
}"""


def _launch(page, server: str, project, agent, name: str, *, steps: int, gate: bool = False) -> Run:
    page.goto(f"{server}/projects/{project.id}/runs/new/")
    page.select_option("#id_agent", str(agent.id))
    page.fill("#id_name", name)
    page.fill("#id_steps", str(steps))
    page.fill("#id_group_size", "2")
    page.fill("#id_groups_per_step", "2")
    if gate:
        page.check("#id_review_gate")
    page.click("#launch")
    page.wait_for_url("**/runs/*/")
    return Run.objects.get(project=project, name=name)


def _at(run: Run, moment: str) -> None:
    """The scripted engine entered `moment` ("<step>:<phase>", tests/webapp/scripted_engine.py)."""
    marker = Path(run.output_dir) / "moment"
    wait_for(lambda: marker.exists() and marker.read_text() == moment, timeout=60, interval=0.02,
             message=f"the engine to reach {moment}", explain=lambda: run_story(run))


HELD = re.compile(r"^paused (after step 1|before step 2 trains)$")


def _statuses(page) -> list[str]:
    return page.evaluate("() => window.__statuses")


def test_a_double_clicked_pause_says_pausing_until_the_engine_holds_then_paused_live_in_two_tabs_as_a_reload(
        scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Pause project")
    agent = agent_factory(project=project, name="steady", environment_options={"exact_match": True, "phase_s": 1.5})
    scenario_set_factory(project=project, name="tasks")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        pauses: list[int] = []
        page.on("response", lambda r: "/pause/" in r.url and pauses.append(r.status))
        log_in(page, server, project.owner.username)
        run = _launch(page, server, project, agent, "pause-run", steps=2)
        other = browser.new_page(viewport={"width": 1400, "height": 1000})  # a second tab, left open
        log_in(other, server, project.owner.username)
        other.goto(f"{server}/runs/{run.id}/")
        for tab in (page, other):
            tab.evaluate(WATCH_STATUS)

        # Step 1 trained; the engine waits a phase before step 2's rollouts. The pause meets it there, between the
        # steps (or, on a slow machine, before step 2 trains): either way only the engine's own word that it holds
        # (run_held) ends "Pausing", no other event of the steps follows.
        _at(run, "2:rollouts")
        wait_for(lambda: Run.objects.get(pk=run.pk).steps_done == 1, timeout=30, message="step 1 recorded")
        page.dblclick("#pause")
        for tab in (page, other):
            expect(tab.locator("#run-status")).to_have_text("Paused", timeout=30_000)
            expect(tab.locator("#run-phase")).to_have_text(HELD)
            seen = _statuses(tab)
            assert seen[-2:] == ["Pausing", "Paused"], seen  # "Pausing" until the engine held, then "Paused"
            assert tab.evaluate("() => window.__sameDocument") is True  # live, no reload
        expect(page.locator("#control-error")).to_have_count(0)  # the second click is not shown as a refusal
        assert pauses and all(status == 200 for status in pauses), pauses
        paused = [e for e in run.events.filter(kind="status").order_by("seq") if e.payload["run"]["status"] == "paused"]
        assert len(paused) == 1, [e.payload for e in paused]  # one request's effect
        assert run.events.filter(kind="run_held").count() == 1
        page.screenshot(path=str(SHOTS / "review-states-paused-live.png"), full_page=False)

        page.reload()
        expect(page.locator("#run-status")).to_have_text("Paused")
        expect(page.locator("#run-phase")).to_have_text(HELD)
        assert Run.objects.get(pk=run.pk).steps_done == 1  # the engine held: no step trained after the pause

        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#cancel")
        expect(other.locator("#run-status")).to_have_text("Cancelled", timeout=30_000)


def test_a_pause_after_approve_is_kept_and_a_parked_runs_cards_and_banner_say_what_resume_will_do_everywhere(
        scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Gate project")
    reviewer = member_factory(project=project, role=Role.REVIEWER)
    agent = agent_factory(project=project, name="reviewed", environment_options={"exact_match": True, "phase_s": 2.5,
                                                                                 "review": True})
    scenario_set_factory(project=project, name="tasks")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)
        run = _launch(page, server, project, agent, "gated-run", steps=2, gate=True)
        expect(page.locator("#run-status")).to_have_text("Awaiting review", timeout=60_000)
        page.click("#approve")
        expect(page.locator("#run-status")).to_have_text("Running")
        assert page.url == f"{server}/runs/{run.id}/"  # the run page, live; not the header fetched alone
        page.evaluate(WATCH_STATUS)

        # Seconds after Approve, while step 2 is scored (its review not asked for yet), the person pauses.
        _at(run, "2:judging")
        page.click("#pause")
        wait_for(lambda: run.events.filter(kind="review_requested", payload__step=2).exists(), timeout=30,
                 message="step 2's review request", explain=lambda: run_story(run))
        expect(page.locator("#run-phase")).to_have_text("paused before step 2's review: Resume opens it")
        expect(page.locator("#run-status")).to_have_text("Paused")
        assert "Awaiting review" not in _statuses(page)  # the pause was kept, never turned into a review

        # A reviewer scores answer B of step 2 in another tab; the live card follows.
        group = TrajectoryGroup.objects.get(run=run, step_index=2, index=0)
        target = group.trajectories.get(index=1)
        review = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(review, server, reviewer.username)
        review.goto(f"{server}/groups/{group.id}/")
        column = review.locator(f"#col-{target.id}")
        column.locator("input[name=score]").fill("0.99")
        column.locator("input[name=reason]").fill("B is right")
        column.locator(".override-form button").click()
        expect(review.locator(".messages")).to_contain_text("score overridden")
        expect(page.locator(f"#group-{group.id} .human").filter(has_text="0.990")).to_have_count(1)

        # A queued run makes the worker park this one (its engine stops). The page left open says so live.
        waiting = run_factory(project=project, name="waiting", status=RunStatus.QUEUED, steps=1,
                              agent=agent_factory(project=project, environment_options={"exact_match": True}))
        wait_for(lambda: Run.objects.get(pk=run.pk).worker == PARKED, timeout=60, message="the run to be parked",
                 explain=lambda: run_story(run))
        wait_for(lambda: Run.objects.get(pk=waiting.pk).status == RunStatus.COMPLETED, timeout=60,
                 message="the waiting run to run on the freed worker")
        banner = page.locator("#pending-overrides")
        # The header no longer promises that Resume opens the review: after the park it rolls the step out again.
        expect(page.locator("#run-phase")).to_have_text(
            "paused before step 2's review; its engine stopped to let a queued run use the worker: resume continues "
            "from the step 1 checkpoint")
        expect(banner).to_contain_text("1 human score on step 2 has not trained yet")
        expect(banner).to_contain_text("This run is parked")
        expect(banner).to_contain_text("Resume rolls that step out again")
        redo = page.locator('#groups .group[data-step="2"] td.trained[title^="not trained: Resume rolls step 2 out '
                            'again"]')
        expect(redo).to_have_count(4, timeout=15_000)  # every answer of both groups, not one card only
        live = live_settled(page, lambda: page.evaluate(READ_CARDS))  # each card is a fetch of its own
        assert page.evaluate("() => window.__sameDocument") is True
        notes = [note for _, _, note in live["2"]]
        assert not [n for n in notes if "will train on" in n], notes
        assert "so 0.990 does not train" in " ".join(notes)
        assert [shown for _, shown, _ in live["2"]] == ["not yet"] * 4
        page.screenshot(path=str(SHOTS / "review-states-parked-cards.png"), full_page=True)

        # A reload, and the reviewer's own tab on the run page, say the same.
        live_banner = banner.inner_text()
        page.reload()
        assert page.evaluate(READ_CARDS) == live and banner.inner_text() == live_banner
        review.goto(f"{server}/runs/{run.id}/")
        assert review.evaluate(READ_CARDS) == live
        assert review.locator("#pending-overrides").inner_text() == live_banner

        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#cancel")  # a parked run has no engine: it ends at once
        expect(page.locator("#run-status")).to_have_text("Cancelled")


def test_resume_of_a_failed_run_with_pending_human_scores_asks_first_in_every_tab_and_cancel_leaves_it_failed(
        scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    run = run_factory(status=RunStatus.FAILED, error="the engine exited with code 1", steps_done=1,
                      reviewed_through_step=1, name="failed-run")
    run.checkpoints.create(step_index=1, path="ckpt-1", adapter_name="failed-run@1")
    answer = _group(run, step=2, scores=[0.2, 0.4])[1]
    trajectory_override(user=run.project.owner, trajectory=answer, score=0.99, reason="B is right")
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, run.project.owner.username)
        page.goto(f"{server}/runs/{run.id}/")
        banner = page.locator("#pending-overrides")
        expect(banner).to_contain_text("This run failed: Resume starts again from the step 1 checkpoint")
        asked: list[str] = []

        def dismiss(dialog) -> None:
            asked.append(dialog.message)
            dialog.dismiss()

        page.once("dialog", dismiss)
        page.click("#resume")
        wait_for(lambda: asked, timeout=10, message="Resume to ask before it goes on")
        assert "1 human score on step 2 has not trained yet" in asked[0]
        assert "Resume rolls that step out again from the step 1 checkpoint" in asked[0]
        page.wait_for_timeout(500)  # a request the dialog failed to stop would have answered by now
        expect(page.locator("#run-status")).to_have_text("Failed")
        assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED
        page.screenshot(path=str(SHOTS / "review-states-failed-resume.png"), full_page=False)

        # A second tab says the same, and its Resume asks the same.
        other = browser.new_page(viewport={"width": 1400, "height": 1000})
        log_in(other, server, run.project.owner.username)
        other.goto(f"{server}/runs/{run.id}/")
        assert other.locator("#pending-overrides").inner_text() == banner.inner_text()
        other.once("dialog", dismiss)
        other.click("#resume")
        wait_for(lambda: len(asked) == 2, timeout=10, message="the second tab's Resume to ask")
        assert asked[1] == asked[0]
        assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED


def test_the_playground_from_a_run_the_generator_and_a_new_project_take_their_defaults_from_context(
        scripted_server):  # noqa: F811
    from playwright.sync_api import expect

    server = scripted_server
    project = project_factory(name="Defaults project")
    old = rubric_factory(project=project, text="The run's own rubric: concise answers win.").latest_version
    zeta = judge_factory(project=project, name="zeta judge")
    run = run_factory(project=project, status=RunStatus.COMPLETED, rubric_version=old, judge_config=zeta,
                      name="scored-run")
    group = _group(run, step=1, scores=[0.2, 0.8])[0].group
    rubric_factory(project=project, text="A newer rubric, for other runs.")  # newer: what the page used to pick
    judge_factory(project=project, name="alpha judge")  # first by name: what the generator used to pick
    scenario_set = scenario_set_factory(project=project, name="drafts")
    newcomer = user_factory()
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, project.owner.username)

        # From the run's page to the playground: the run's rubric version and judge, its groups chosen.
        page.goto(f"{server}/runs/{run.id}/")
        page.click("#run-playground-link")
        form = page.locator("#playground-form")
        for _ in range(2):  # as opened, and again after Back then forward
            expect(form.locator("select[name=base_version]")).to_have_value(str(old.id))
            expect(form.locator("select[name=judge_config]")).to_have_value(str(zeta.id))
            expect(form.locator("textarea[name=text]")).to_have_value(old.text)
            expect(page.locator("#playground-source")).to_contain_text("as run scored-run was scored with")
            expect(form.locator(f"input[name=groups][value='{group.id}']")).to_be_checked()
            page.go_back()
            expect(page.locator("#run-status")).to_have_text("Completed")
            page.go_forward()

        # The scenario generator is drafted by the project's default judge (its runs'), not the first by name.
        page.goto(f"{server}/scenario-sets/{scenario_set.id}/generate/")
        expect(page.locator("#judge")).to_have_value(str(zeta.id))

        # A project made from the home page's form lists its owner among the members.
        log_in(page, server, newcomer.username)
        page.goto(f"{server}/")
        create = page.locator("form", has=page.get_by_role("button", name="Create project"))
        create.locator("input[name=name]").fill("My first project")
        create.get_by_role("button", name="Create project").click()
        made = Project.objects.get(name="My first project")
        page.wait_for_url(f"**/projects/{made.id}/")
        owner = page.locator("#member-owner")
        expect(owner).to_contain_text(newcomer.username)
        expect(owner.locator(".badge").first).to_have_text("owner")
        page.reload()
        expect(page.locator("#member-owner")).to_contain_text(newcomer.username)
