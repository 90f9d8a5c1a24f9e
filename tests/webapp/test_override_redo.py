"""No human override is lost when a step is rolled out again (issue 34, item 1): a pending override of a replaced
group is carried to the new trajectory with the same scenario and answer text, or marked discarded with the
step's redo on the audit trail, the API and the group page; none says it changed the step's rewards, and the
API never shows an override with no trajectory and no group that applies to training."""
from __future__ import annotations

import pytest

from tests.webapp.factories import PASSWORD, member_factory, run_factory
from tests.webapp.test_review import _api, _group
from webapp.models import Role, RunStatus, ScoreOverride
from webapp.models.runs import PARKED
from webapp.selectors.rewards import trajectory_reward
from webapp.services.review import run_review_rewards, trajectory_override

pytestmark = pytest.mark.django_db


def _login(client, user):
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _paused_with_pending_override(answers_again: list[str]):
    """Step 1 trained; step 2 scored, overridden by a reviewer (answer C: 0.231 → 0.95), then rolled out again."""
    run = run_factory(status=RunStatus.PAUSED)
    reviewer = member_factory(project=run.project, role=Role.REVIEWER)
    _group(run, step=1, scores=[0.4, 0.6])
    run_review_rewards(run_id=run.id, step=1)
    first = _group(run, step=2, scores=[0.9, 0.5, 0.231], answers=["move left", "move up", "move down"])
    trajectory_override(user=reviewer, trajectory=first[2], score=0.95, reason="down keeps the corner")
    old_group_id = first[0].group_id
    again = _group(run, step=2, scores=[0.8, 0.3, 0.7], answers=answers_again)  # the redo replaces the group
    return run, reviewer, old_group_id, again


def test_a_pending_override_is_carried_to_the_redone_trajectory_that_gives_the_same_answer(client):
    run, reviewer, old_group_id, again = _paused_with_pending_override(["move up", "move left", "move down"])
    carried = again[2]
    carried.refresh_from_db()
    assert carried.override_score == 0.95 and carried.effective_reward == 0.95
    assert trajectory_reward(trajectory=carried)["note"] == (  # paused with its engine: a park would redo it
        "not trained yet: step 2 trains on 0.950 if resumed before a queued run parks this run; after a park, "
        "Resume rolls it out again")

    rows = _api(run.project.owner).get(f"/api/runs/{run.id}/overrides/").json()["results"]
    assert not [r for r in rows if r["trajectory"] is None and r["group"] is None and r["applies_to_training"]]
    new_row, old_row = rows[0], rows[1]
    assert (new_row["kind"], new_row["trajectory"], new_row["after"], new_row["applies_to_training"]) == \
        ("carried", carried.id, 0.95, True)
    assert new_row["user"] == reviewer.username and "down keeps the corner" in new_row["reason"]
    assert (old_row["redo"], old_row["applies_to_training"], old_row["trajectory"]) == ("carried", False, None)
    assert old_row["training"].startswith("carried to step 2's redo")

    _login(client, run.project.owner)
    audit = client.get(f"/runs/{run.id}/review/").content.decode().split('id="audit"')[1].split("</table>")[0]
    assert "carried to step 2&#x27;s redo" in audit and "changed the step&#x27;s rewards" not in audit
    assert "pending: trains if the run is resumed before a queued run parks it" in audit  # the carried row
    page = client.get(f"/groups/{carried.group_id}/").content.decode()
    assert 'id="redo-overrides"' in page and "carried from the earlier rollout" in page
    assert client.get(f"/groups/{old_group_id}/").status_code == 404

    # The step trains on it: the engine's review answer carries the human score, and the audit then says so.
    assert run_review_rewards(run_id=run.id, step=2)["rewards"]["0"] == [0.8, 0.3, 0.95]
    audit = client.get(f"/runs/{run.id}/review/").content.decode().split('id="audit"')[1].split("</table>")[0]
    assert audit.count("changed the step&#x27;s rewards") == 1


def test_a_pending_override_without_the_same_answer_in_the_redo_is_marked_discarded_everywhere(client):
    run, _, _, again = _paused_with_pending_override(["move up", "move left", "move right"])
    assert all(t.override_score is None for t in again)
    assert run_review_rewards(run_id=run.id, step=2)["rewards"]["0"] == [0.8, 0.3, 0.7]

    (row,) = _api(run.project.owner).get(f"/api/runs/{run.id}/overrides/").json()["results"]
    assert (row["trajectory"], row["group"], row["applies_to_training"], row["redo"]) == (None, None, False, "discarded")
    assert row["training"].startswith("discarded with step 2's redo")
    assert ScoreOverride.objects.get(pk=row["id"]).after == 0.95  # the record itself is kept as it was

    _login(client, run.project.owner)
    audit = client.get(f"/runs/{run.id}/review/").content.decode().split('id="audit"')[1].split("</table>")[0]
    assert "discarded with step 2&#x27;s redo" in audit and "changed the step&#x27;s rewards" not in audit
    page = client.get(f"/groups/{again[0].group_id}/").content.decode()
    section = page.split('id="redo-overrides"')[1].split("</section>")[0]
    assert "answer <span class=\"label\">C</span> of the earlier rollout" in section and "discarded with step 2" in section


def test_a_reviewer_is_told_before_a_paused_run_with_pending_overrides_is_parked_or_resumed(client):
    run = run_factory(status=RunStatus.PAUSED)
    _group(run, step=1, scores=[0.4, 0.6])
    t = _group(run, step=1, index=1, scores=[0.2, 0.7])[0]
    trajectory_override(user=run.project.owner, trajectory=t, score=0.9, reason="better")
    _login(client, run.project.owner)
    for url in (f"/runs/{run.id}/", f"/groups/{t.group_id}/"):
        note = client.get(url).content.decode().split('id="pending-overrides"')[1].split("</div>")[0]
        assert "1 human score on step 1 has not trained yet" in note and "a queued run makes the worker park it" in note
    run.__class__.objects.filter(pk=run.pk).update(worker=PARKED)
    note = client.get(f"/runs/{run.id}/").content.decode().split('id="pending-overrides"')[1].split("</div>")[0]
    assert "This run is parked" in note and "Resume rolls that step out again" in note
    run_review_rewards(run_id=run.id, step=1)  # the step trained: nothing is pending any more
    assert 'id="pending-overrides"' not in client.get(f"/runs/{run.id}/").content.decode()
