"""A step's health signals (entropy on sampled tokens, answers cut off, the reward distribution, groups without
variance) reach the run page's step table and the API as the engine computed them (issue 46)."""
from __future__ import annotations

import asyncio

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import run_factory
from training.config import GRPOConfig
from training.events import StepFinished
from training.rl.groups import score_group, step_metrics
from training.monitoring.monitors import step_signals
from training.types import Scenario, Trajectory, TrajectoryGroup, env_reward_scorer
from webapp.live.ingest import run_event_ingest
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db


def _step_groups() -> list[TrajectoryGroup]:
    """Two groups as a rollout leaves them: one with a spread of rewards, one where every answer was cut off."""
    def answer(reward: float, reason: str) -> Trajectory:
        return Trajectory("s", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a b"}],
                          turn_token_ids=[[1, 2]], turn_logprobs=[[-0.2, -0.6]], finish_reasons=[reason],
                          env_reward=reward, completion_tokens=2)

    groups = [TrajectoryGroup(Scenario("s", "q"), [answer(r, "stop") for r in (0.0, 0.5, 1.0)]),
              TrajectoryGroup(Scenario("s", "q"), [answer(0.0, "length") for _ in range(3)])]
    for g in groups:
        asyncio.run(score_group(g, env_reward_scorer, GRPOConfig(group_size=3)))
    return groups


def test_the_step_table_and_the_api_show_entropy_truncation_quartiles_and_zero_variance(client):
    run = run_factory(status=RunStatus.RUNNING)
    groups = _step_groups()
    metrics = {"step": 1, **step_metrics(groups), **step_signals(groups, {}, ngram=3)}
    run_event_ingest(run_id=run.id, event=StepFinished(step=1, metrics=metrics).to_dict())

    client.force_login(run.project.owner)
    table = client.get(reverse("run-steps", args=[run.id])).content.decode()
    assert "Entropy" in table and "Cut off" in table and "No-variance share" in table
    assert '<td class="reward-distribution">0.000 · 0.000 · 0.000 · 0.375 · 1.000</td>' in table
    assert '<td class="zero-variance">0.50</td>' in table  # the cut-off group has no spread
    assert '<td class="entropy">0.400</td>' in table  # mean of -(-0.2) and -(-0.6)
    assert '<td class="truncated">0.50</td>' in table

    api = APIClient()
    api.force_authenticate(run.project.owner)
    [step] = api.get(f"/api/runs/{run.id}/steps/").json()["results"]
    m = step["metrics"]
    assert (m["reward_q1"], m["reward_median"], m["reward_q3"]) == (0.0, 0.0, 0.375)
    assert m["mon_entropy"] == pytest.approx(0.4) and m["mon_truncated"] == 0.5 and m["mon_zero_variance"] == 0.5
