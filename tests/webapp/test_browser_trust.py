"""The gated-override story in a real browser (Debian chromium via Playwright, headless), as issue 11 found it:
the judge likes answer C best (0.747); a reviewer overrides it to 0.1 with a reason, approves, and the step
trains. The group page, the trajectory page (opened from the audit row), the audit and the API must then show the
same label and the same judge score, human score, reward that trained and advantage.

The engine is outside this test: its events (group scored, review requested, review applied with advantages from
the engine's own `group_advantages`) are fed through the same ingest path the runner uses. Screenshots go to
var/screenshots/."""
from __future__ import annotations


import pytest

from tests.webapp.factories import member_factory, run_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in, outside_the_loop
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from webapp.live.ingest import run_event_ingest
from webapp.models import Role, RunStatus, ScoreOverride, Trajectory
from webapp.services.review import run_review_rewards

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

JUDGE = [0.5, 0.3, 0.747, 0.2]  # answer C (rollout index 2) is the judge's favourite


def _scored_and_waiting(run) -> None:
    records = [{"messages": [{"role": "user", "content": "What is the refund policy?"},
                             {"role": "assistant", "content": f"Answer number {i}: " + "refunds " * 40}],
                "reward": s, "judge_score": s, "explanation": "Cites the policy." if i == 2 else "Vague.",
                "advantage": None} for i, s in enumerate(JUDGE)]
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
                                           "trajectories": records, "reward_mean": sum(JUDGE) / 4,
                                           "reward_std": 0.2, "skipped": False})
    run_event_ingest(run_id=run.id, event={"kind": "review_requested", "step": 1})


def _engine_trains_the_reviewed_step(run) -> list[float]:
    """What the runner and the engine do once the run leaves awaiting_review."""
    from training.rl.grpo import group_advantages

    rewards = run_review_rewards(run_id=run.id, step=1)["rewards"]["0"]
    advantages = [float(a) for a in group_advantages(rewards)]
    run_event_ingest(run_id=run.id, event={"kind": "review_applied", "step": 1,
                                           "groups": [{"group_index": 0, "advantages": advantages}]})
    run_event_ingest(run_id=run.id, event={"kind": "step_finished", "step": 1, "metrics": {}})
    return rewards


def _scores(scope) -> dict[str, str]:
    return {name: scope.locator(f".{name}").first.inner_text().strip()
            for name in ("judge", "human", "effective", "trained", "advantage")}


def test_a_gated_override_shows_one_label_and_one_reward_on_every_page_and_the_api(server):  # noqa: F811
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    run = run_factory(status=RunStatus.RUNNING, review_gate=True, name="gated-story")
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    _scored_and_waiting(run)
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_REVIEW
    top = Trajectory.objects.get(group__run=run, index=2)
    assert top.label == "C" and top.rank == 1

    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        log_in(page, server, reviewer.username)

        page.goto(f"{server}/groups/{top.group_id}/")
        column = page.locator(f"#col-{top.id}")
        expect(column.locator("h2 .label")).to_have_text("C")
        expect(column.locator(".trained")).to_have_text("not trained yet")
        column.locator("input[name=score]").fill("0.1")
        column.locator("input[name=reason]").fill("invents a refund window")
        column.locator(".override-form button").click()
        expect(page.locator(".messages")).to_contain_text("score overridden")
        page.click("#gate-note #approve")
        expect(page.locator(".messages")).to_contain_text("review approved")

        rewards = outside_the_loop(_engine_trains_the_reviewed_step, run)
        assert rewards[2] == 0.1  # the engine got the human score
        top.refresh_from_db()
        expected = {"judge": "0.747", "human": "0.100", "effective": "0.100", "trained": "0.100",
                    "advantage": f"{top.advantage:.3f}"}
        assert top.advantage < 0  # the judge's favourite now pulls the policy away from itself

        page.reload()
        column = page.locator(f"#col-{top.id}")
        expect(column.locator("h2 .label")).to_have_text("C")
        assert _scores(column) == expected
        page.screenshot(path=str(SHOTS / "trust-group.png"), full_page=True)

        page.goto(f"{server}/runs/{run.id}/review/")
        row = page.locator("#audit tbody tr").first
        expect(row.locator(".label")).to_have_text("C")
        expect(row).to_contain_text("changed the step's rewards")
        expect(row).to_contain_text("0.747")
        row.locator("a").click()
        page.wait_for_url(f"**/trajectories/{top.id}/")
        expect(page.locator("#trajectory-label")).to_have_text("C")
        assert _scores(page.locator("#trajectory-rewards")) == expected
        expect(page.locator("#reward-note")).to_have_text("trained on 0.100")
        page.screenshot(path=str(SHOTS / "trust-trajectory.png"), full_page=True)

        page.goto(f"{server}/runs/{run.id}/")
        card_row = page.locator(f"#group-{top.group_id} tr[data-label=C]")
        assert _scores(card_row) == expected

        body = page.request.get(f"{server}/api/trajectories/{top.id}/").json()
        review = body["review"]
        assert body["label"] == review["label"] == "C"
        assert (review["judge_score"], review["human_score"], review["effective_reward"], review["trained_reward"]) \
            == (0.747, 0.1, 0.1, 0.1)
        assert review["trained"] and f"{review['advantage']:.3f}" == expected["advantage"]
        audit = page.request.get(f"{server}/api/runs/{run.id}/overrides/").json()["results"][0]
        assert audit["trajectory_label"] == "C" and audit["applies_to_training"] and audit["after"] == 0.1
        browser.close()
    assert ScoreOverride.objects.filter(run=run).count() == 1


def test_settings_panel_rubric_diff_overlay_and_test_judge_in_the_browser(server):  # noqa: F811
    from playwright.sync_api import expect

    from tests.judge_double import JudgeDouble
    from tests.webapp.factories import judge_factory, project_factory, rubric_factory
    from webapp.services.catalogue import rubric_version_create

    SHOTS.mkdir(parents=True, exist_ok=True)
    project = project_factory(name="Refund desk")
    with JudgeDouble(responder=JudgeDouble.score_by(lambda t: 0.1 if "5" in t else 0.9)) as double:
        # The server process reads the key from its own environment, which the test cannot change: store it.
        judge = judge_factory(project=project, name="double", model=double.model, api_base=double.api_base)
        from webapp.services.catalogue import judge_config_update

        judge_config_update(user=project.owner, judge=judge, api_key="test")
        rubric = rubric_factory(project=project, text="Prefer short answers that cite the refund policy.")
        v1 = rubric.latest_version
        v2 = rubric_version_create(user=project.owner, rubric=rubric,
                                   text="Prefer complete answers that cite the refund policy and its exceptions.")
        runs = []
        for name, version, curve in (("refunds-v1", v1, [0.31, 0.42, 0.47]), ("refunds-v2", v2, [0.35, 0.55, 0.68])):
            run = run_factory(project=project, name=name, judge_config=judge, rubric_version=version,
                              status=RunStatus.COMPLETED, steps=3, overrides={"grpo": {"beta": 0.04}})
            for step, value in enumerate(curve, start=1):
                run_event_ingest(run_id=run.id, event={"kind": "step_finished", "step": step,
                                                       "metrics": {"reward_mean": value, "judge_mean": value}})
            runs.append(run)

        with launch_chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            log_in(page, server, project.owner.username)

            page.goto(f"{server}/runs/{runs[1].id}/")
            expect(page.locator("#source-chart .legend")).to_contain_text("judge score")
            expect(page.locator("#source-chart .legend")).not_to_contain_text("env reward")  # no env reward here
            ticks = page.locator("#reward-chart .xtick text").evaluate_all("els => els.map(e => e.textContent)")
            assert ticks and all(t.isdigit() for t in ticks), ticks  # whole steps only
            page.click("#run-config summary")
            panel = page.locator("#run-config")
            for text in ("tiny-2048", "Learning rate", "0.001", "Group size", "Seed", "openai/judge",
                         f"{rubric.name} v2"):
                expect(panel).to_contain_text(text)
            panel.screenshot(path=str(SHOTS / "run-config-panel.png"))

            # A step with no reward (every group skipped) breaks the ± std band: no shape spans it.
            gap = run_factory(project=project_factory(owner=project.owner), name="with-a-gap",
                              status=RunStatus.COMPLETED, steps=4)  # its own project: not in the overlay below
            for step, value in enumerate([0.4, None, 0.5, 0.6], start=1):
                outside_the_loop(run_event_ingest, run_id=gap.id, event={
                    "kind": "step_finished", "step": step,
                    "metrics": {"reward_mean": value, "reward_std": None if value is None else 0.1}})
            page.goto(f"{server}/runs/{gap.id}/")
            page.wait_for_function("() => (document.getElementById('reward-chart').data || []).length > 0")
            bands = page.evaluate("() => document.getElementById('reward-chart').data"
                                  ".filter(t => t.meta === 'std-band').map(t => [t.x, t.y])")
            assert [b[0] for b in bands] == [[0.85, 1.15, 1.15, 0.85], [3, 4, 4, 3]], bands  # a lone step: a bar
            assert [round(v, 3) for v in bands[1][1]] == [0.6, 0.7, 0.5, 0.4]
            page.locator("#reward-chart").screenshot(path=str(SHOTS / "reward-band-gap.png"))

            empty = run_factory(project=project, name="not-started")
            page.goto(f"{server}/runs/{empty.id}/")
            expect(page.locator("#reward-chart")).to_have_text("The curves appear when the first step finishes.")
            assert not page.locator("#reward-chart .xtick").count()

            page.goto(f"{server}/rubrics/{rubric.id}/")
            expect(page.locator("#rubric-diff-text del")).to_contain_text(["short"])
            expect(page.locator("#rubric-diff-text ins").first).to_contain_text("complete")
            expect(page.locator("#version-runs-1")).to_contain_text("refunds-v1")
            page.locator("#rubric-diff").screenshot(path=str(SHOTS / "rubric-diff.png"))

            page.goto(f"{server}/projects/{project.id}/runs/")
            page.click("#compare-runs-link")
            for box in page.locator("#overlay-form input[type=checkbox]").all():
                box.check()
            page.click("#overlay")
            expect(page.locator("#overlay-reward .scatterlayer .trace")).to_have_count(2)
            expect(page.locator("#overlay-reward .legend")).to_contain_text("refunds-v2")
            expect(page.locator("#overlay-agreement-empty")).to_be_visible()  # no human labels: said, not drawn
            page.screenshot(path=str(SHOTS / "runs-overlay.png"), full_page=True)

            page.goto(f"{server}/judges/{judge.id}/")
            page.click("#test-judge")
            expect(page.locator("#judge-test-outcome")).to_have_attribute("data-ok", "1", timeout=30_000)
            expect(page.locator("#judge-test-reply")).to_contain_text("trajectory_id")
            expect(page.locator("#judge-test-outcome")).to_contain_text("“4” and “5”: 0.900, 0.100")
            page.locator("#judge-test-result").scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "test-judge.png"), full_page=True)
            browser.close()
        assert len(double.requests) == 1
