"""The review gate on the real engine (tiny model): the run waits after scoring, a reviewer's override changes the
step's advantages and the trained adapter, and approving lets it train. Rollouts come from a fixed-answer
environment (tests/webapp/fixed_answers_engine.py), so a run without the override rolls out exactly the same
trajectories and is the "without" of the comparison."""
from __future__ import annotations

import time

import pytest

from tests.webapp.conftest import wait_for
from tests.webapp.factories import TEST_TINY_MODEL, member_factory, project_factory, scenario_set_factory
from tests.webapp.fixed_answers_engine import REWARDS
from training.rl.grpo import group_advantages
from webapp.execution.executors import wait_idle
from webapp.models import Agent, Role, Run, RunStatus, Trajectory
from webapp.services.review import run_review_approve, trajectory_override
from webapp.services.runs import run_launch

pytestmark = pytest.mark.django_db(transaction=True)


def _launch(tiny_model_dir, *, project, gate: bool, name: str) -> Run:
    from training.fixtures.demo import demo_config

    lora = demo_config(out_dir="unused", steps=1, model_dir=tiny_model_dir).lora.model_dump()
    agent = Agent.objects.create(project=project, name=name, base_model=TEST_TINY_MODEL,
                                 system_prompt="Play 2048.", environment_kind="fixed_answers", max_tokens=8)
    return run_launch(user=project.owner, project=project, name=name, agent=agent,
                      scenario_set=scenario_set_factory(project=project, scenarios=2), steps=1, group_size=4,
                      groups_per_step=2, learning_rate=0.05, overrides={"lora": lora},
                      review_gate=gate)


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _by_group(run: Run, field: str) -> list[list[float]]:
    rows = Trajectory.objects.filter(group__run=run).order_by("group__index", "index").values_list("group__index", field)
    groups: dict[int, list[float]] = {}
    for index, value in rows:
        groups.setdefault(index, []).append(value)
    return [groups[i] for i in sorted(groups)]


def _adapter(run: Run) -> dict:
    from safetensors.torch import load_file

    return load_file(f"{run.checkpoints.get(step_index=1).path}/adapter_model.safetensors")


def test_an_override_during_a_gated_step_changes_its_advantages_and_the_trained_update(
        inprocess_executor, settings, tiny_model_dir):
    settings.STUDIO_ENGINE = "tests.webapp.fixed_answers_engine:train"
    project = project_factory()
    gated = _launch(tiny_model_dir, project=project, gate=True, name="gated")
    wait_for(lambda: _status(gated) == RunStatus.AWAITING_REVIEW, timeout=180, message="the gate to hold the run")
    time.sleep(1.5)  # it stays held: nothing trains until a reviewer approves
    assert _status(gated) == RunStatus.AWAITING_REVIEW
    assert not gated.checkpoints.exists() and not gated.events.filter(kind="train_step").exists()
    assert _by_group(gated, "reward") == [REWARDS, REWARDS]

    reviewer = member_factory(project=project, role=Role.REVIEWER)
    refusal = Trajectory.objects.get(group__run=gated, group__index=0, index=2)  # "I would rather not play": 0.1
    trajectory_override(user=reviewer, trajectory=refusal, score=1.0, reason="the refusal is the right call here")
    run_review_approve(user=reviewer, run=gated)
    wait_idle(timeout=180)
    assert _status(gated) == RunStatus.COMPLETED and gated.checkpoints.count() == 1

    plain = _launch(tiny_model_dir, project=project, gate=False, name="plain")  # same rollouts, no override, no waiting
    wait_idle(timeout=180)
    assert _status(plain) == RunStatus.COMPLETED
    assert _by_group(plain, "reward") == _by_group(gated, "reward")  # the judge-side rewards are identical

    reviewed = [0.8, 0.6, 1.0, 0.4]
    assert _by_group(gated, "advantage")[0] == pytest.approx(group_advantages(reviewed).tolist(), abs=1e-6)
    assert _by_group(plain, "advantage")[0] == pytest.approx(group_advantages(REWARDS).tolist(), abs=1e-6)
    assert _by_group(gated, "advantage")[1] == pytest.approx(_by_group(plain, "advantage")[1], abs=1e-6)
    applied = gated.events.get(kind="review_applied").payload
    assert applied["changed_advantages"] == 4  # only the overridden group's advantages moved

    again = _launch(tiny_model_dir, project=project, gate=False, name="again")  # the control: training here is deterministic
    wait_idle(timeout=180)
    with_override, without, control = _adapter(gated), _adapter(plain), _adapter(again)
    assert with_override.keys() == without.keys() == control.keys()
    assert all(bool((without[k] == control[k]).all()) for k in without)  # same rewards, same update, bit for bit
    moved = max(float((with_override[k] - without[k]).abs().max()) for k in with_override)
    assert moved > 1e-6  # the same rollouts trained into a different adapter: the override reached the update
    assert gated.overrides.get().applies_to_training is True
