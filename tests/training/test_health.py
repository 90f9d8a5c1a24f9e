"""Health signals per step (training/monitoring/health.py) and the monitors that say learning has stalled."""
from __future__ import annotations

import asyncio

import pytest

from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.rl.groups import step_metrics
from training.monitoring.health import sampled_entropy, truncated_share, zero_variance_share
from training.monitoring.monitors import MonitorConfig, Monitors, step_signals
from training.types import Scenario, Trajectory, TrajectoryGroup


def trajectory(logprobs=None, reasons=(), reward=None, error=None) -> Trajectory:
    return Trajectory("s", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                      turn_logprobs=list(logprobs or []), finish_reasons=list(reasons), reward=reward, error=error)


def group(*ts: Trajectory, skipped: bool = False) -> TrajectoryGroup:
    return TrajectoryGroup(Scenario("s", "q"), list(ts), skipped=skipped)


def test_entropy_is_the_mean_negative_log_prob_of_every_sampled_token():
    g = group(trajectory([[-0.5, -1.5], None]), trajectory([[-1.0]]),
              trajectory([[-9.0]], error="the tool server died"))  # a failed rollout trains nothing
    assert sampled_entropy([g]) == pytest.approx(1.0)
    assert sampled_entropy([group(trajectory([None]))]) is None  # a server that returned no log-probs


def test_the_truncated_share_counts_answers_cut_off_at_max_tokens():
    g = group(trajectory(reasons=["stop", "length"]), trajectory(reasons=["length", "tool_calls"]))
    assert truncated_share([g]) == 0.5
    assert truncated_share([group(trajectory())]) is None


def test_a_rollout_records_why_the_server_stopped_each_answer():
    env = get_environment("tictactoe")
    config = RolloutConfig("", SamplingConfig(max_tokens=8), parse_options(env, {"opponent": "self"}))
    x, o = asyncio.run(env.rollout(scripted_client(["<move>5</move>", "<move>5</move>"]), MODEL,
                                   Scenario(id="s", user_message=""), config))
    assert x.finish_reasons == ["stop"] and o.finish_reasons == ["stop"]
    assert sampled_entropy([group(x, o)]) == pytest.approx(0.5)  # the double reports -0.5 for each token


def test_the_step_reports_its_reward_quartiles_and_the_share_of_groups_without_variance():
    flat = group(trajectory(reward=0.5), trajectory(reward=0.5), skipped=True)
    spread = group(*(trajectory(reward=r) for r in (0.0, 0.25, 0.75, 1.0)))
    metrics = step_metrics([flat, spread])
    assert (metrics["reward_min"], metrics["reward_max"]) == (0.0, 1.0)
    # sorted 0, .25, .5, .5, .75, 1: inclusive quartiles at positions 1.25, 2.5 and 3.75
    assert (metrics["reward_q1"], metrics["reward_median"], metrics["reward_q3"]) == (0.3125, 0.5, 0.6875)
    assert zero_variance_share([flat, spread]) == 0.5
    signals = step_signals([flat, spread], {}, ngram=3)
    assert signals["mon_zero_variance"] == 0.5 and signals["mon_truncated"] is None


def test_most_groups_without_variance_alert_only_after_stall_steps_in_a_row_and_name_the_cause():
    m = Monitors(MonitorConfig(stall_steps=3, max_zero_variance=0.5, min_entropy=None))
    flat = {"mon_zero_variance": 1.0, "mon_truncated": 0.0, "mon_entropy": 0.8}
    fired = [m.observe_step(k, s) for k, s in
             enumerate([flat, flat, {**flat, "mon_zero_variance": 0.25}, flat, flat, flat, flat], 1)]
    assert [[a.monitor for a in f] for f in fired] == [[], [], [], [], [], ["zero_variance"], []]
    assert "for 3 steps" in fired[5][0].message and "every answer of a group scored the same" in fired[5][0].message


def test_answers_cut_off_at_max_tokens_step_after_step_are_flagged_as_the_stall():
    m = Monitors(MonitorConfig(stall_steps=2, max_truncated=0.5))
    cut = {"mon_zero_variance": 1.0, "mon_truncated": 0.9, "mon_entropy": 0.8}
    first, second = m.observe_step(1, cut), m.observe_step(2, cut)
    assert first == [] and sorted(a.monitor for a in second) == ["truncation", "zero_variance"]
    by_name = {a.monitor: a for a in second}
    assert "90% of answers were cut off" in by_name["truncation"].message
    assert "most answers were cut off at max_tokens" in by_name["zero_variance"].message


def test_a_policy_that_stopped_exploring_raises_the_entropy_alert():
    m = Monitors(MonitorConfig(stall_steps=2, min_entropy=0.05, pause_on=["entropy"]))
    collapsed = {"mon_zero_variance": 0.0, "mon_truncated": 0.0, "mon_entropy": 0.01}
    alerts = [a for k in (1, 2) for a in m.observe_step(k, collapsed)]
    assert [a.monitor for a in alerts] == ["entropy"] and alerts[0].pause
    assert "0.010 nats" in alerts[0].message
