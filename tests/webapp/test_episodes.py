"""Episodes with several players in the web app: the engine's groups per (scenario, role) are stored with their
role, each side of a game links to the others, and an override on one role's trajectory changes only that
role's group (issue 38)."""
from __future__ import annotations

import asyncio

import pytest
from django.urls import reverse

from tests.webapp.factories import run_factory
from training.config import GRPOConfig
from training.events import StaticControl
from training.rl.groups import apply_scores, group_event, score_group
from training.types import Scenario, Trajectory, env_reward_scorer, groups_by_role
from webapp.execution.engine_child import ReviewMailbox, review_hook
from webapp.live.ingest import run_event_ingest
from webapp.models import RunStatus, Trajectory as TrajectoryRow, TrajectoryGroup
from webapp.services.review import run_review_rewards, trajectory_override

pytestmark = pytest.mark.django_db


def _game(x_reward: float, moves: str) -> list[Trajectory]:
    """One self-play game as the environment returns it: X's side and O's side, rewarded from each side."""
    return [Trajectory(scenario_id="s1", role=role, env_reward=reward,
                       messages=[{"role": "user", "content": "Board"}, {"role": "assistant", "content": moves}])
            for role, reward in (("x", x_reward), ("o", 1.0 - x_reward))]


def _engine_groups():
    grpo = GRPOConfig(group_size=3, groups_per_step=1)
    groups = groups_by_role(Scenario(id="s1", user_message="Play"), ["x", "o"],
                            [_game(1.0, "<move>1</move>"), _game(0.5, "<move>5</move>"), _game(0.0, "<move>9</move>")])
    for group in groups:
        asyncio.run(score_group(group, env_reward_scorer, grpo))
    return groups, grpo


def _ingest(run, groups) -> list[TrajectoryGroup]:
    for index, group in enumerate(groups):
        run_event_ingest(run_id=run.id, event=group_event(1, index, group).to_dict())
    return list(TrajectoryGroup.objects.filter(run=run).order_by("index"))


def test_each_role_is_its_own_group_and_each_side_of_a_game_finds_the_other():
    run = run_factory(status=RunStatus.RUNNING)
    x_group, o_group = _ingest(run, _engine_groups()[0])
    assert (x_group.role, o_group.role) == ("x", "o")
    assert {t.role for t in x_group.trajectories.all()} == {"x"}
    for x_side in x_group.trajectories.all():
        [other] = TrajectoryRow.objects.filter(episode=x_side.episode).exclude(pk=x_side.pk)
        assert other.group_id == o_group.id and other.env_reward == 1.0 - x_side.env_reward


def test_an_override_on_one_roles_trajectory_changes_only_that_roles_advantages():
    run = run_factory(status=RunStatus.RUNNING)
    engine_groups, grpo = _engine_groups()
    x_group, o_group = _ingest(run, engine_groups)
    o_before = [t.advantage for t in engine_groups[1].trajectories]
    stored_o = sorted((t.index, t.advantage) for t in o_group.trajectories.all())

    worst_x = x_group.trajectories.get(index=2)  # X lost this game: reward 0
    trajectory_override(user=run.project.owner, trajectory=worst_x, score=1.0, reason="a fine game all the same")
    assert sorted((t.index, t.advantage) for t in TrajectoryGroup.objects.get(pk=o_group.pk).trajectories.all()) \
        == stored_o  # the other role's group is untouched on the pages ...
    assert all(t.advantage is None for t in TrajectoryGroup.objects.get(pk=x_group.pk).trajectories.all())

    # ... and in the engine, which recomputes the step's advantages from the reviewed rewards.
    mailbox = ReviewMailbox()
    mailbox.put(run_review_rewards(run_id=run.id, step=1))
    x_before = [t.advantage for t in engine_groups[0].trajectories]
    asyncio.run(review_hook(mailbox, StaticControl())(1, engine_groups))
    for group in engine_groups:
        apply_scores(group, grpo)
    assert [t.reward for t in engine_groups[0].trajectories] == [1.0, 0.5, 1.0]
    assert [t.advantage for t in engine_groups[0].trajectories] != x_before
    assert [t.advantage for t in engine_groups[1].trajectories] == o_before


def test_the_pages_show_the_role_and_the_other_side_is_one_click_away(client):
    run = run_factory(status=RunStatus.RUNNING)
    x_group, o_group = _ingest(run, _engine_groups()[0])
    x_side = x_group.trajectories.get(index=0)
    o_side = o_group.trajectories.get(episode=x_side.episode)
    client.force_login(run.project.owner)

    page = client.get(reverse("trajectory-detail", args=[x_side.id])).content.decode()
    assert 'id="trajectory-role">x<' in page
    assert f'href="{reverse("trajectory-detail", args=[o_side.id])}">The other side of this game: o' in page
    group_page = client.get(reverse("group-detail", args=[o_group.id])).content.decode()
    assert 'id="group-role">role o<' in group_page
    assert f'href="{reverse("trajectory-detail", args=[x_side.id])}">the other side of this game: x' in group_page
    run_page = client.get(reverse("run-detail", args=[run.id])).content.decode()
    assert "role x" in run_page and "role o" in run_page


def test_a_game_with_one_player_shows_no_role_and_no_other_side(client):
    run = run_factory(status=RunStatus.RUNNING)
    answers = [Trajectory(scenario_id="s1", messages=[{"role": "assistant", "content": a}], env_reward=r)
               for a, r in (("a", 1.0), ("b", 0.0))]
    [stored] = _ingest(run, groups_by_role(Scenario(id="s1", user_message="Play"), [""], answers))
    client.force_login(run.project.owner)
    page = client.get(reverse("trajectory-detail", args=[stored.trajectories.first().id])).content.decode()
    assert "trajectory-role" not in page and "other side of this game" not in page
