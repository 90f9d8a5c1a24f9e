from __future__ import annotations

import math

import pytest
import torch

from training.rl.grpo import group_advantages, policy_loss


def test_advantages_are_centered_and_divided_by_population_std():
    adv = group_advantages([1.0, 2.0, 3.0], scale="std")
    std = math.sqrt(2 / 3)
    assert adv.tolist() == pytest.approx([-1 / std, 0.0, 1 / std], abs=1e-5)


def test_advantages_without_scaling_are_only_centered():
    assert group_advantages([1.0, 2.0, 6.0], scale=False).tolist() == pytest.approx([-2.0, -1.0, 3.0])


def test_a_group_with_equal_rewards_has_zero_advantages():
    assert group_advantages([0.5, 0.5, 0.5, 0.5]).tolist() == [0.0, 0.0, 0.0, 0.0]


def _lp(ratios: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """logprobs whose exp-difference from zero old logprobs gives the wanted ratios."""
    old = torch.zeros(len(ratios), len(ratios[0]))
    return torch.log(torch.tensor(ratios)), old


def test_positive_advantage_clips_ratios_above_one_plus_eps_high():
    lp, old = _lp([[1.5, 0.5, 1.0]])
    loss, metrics = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 3))
    # -min(1.5, 1.2), -min(0.5, 0.8), -min(1.0, 1.0) averaged over 3 tokens
    assert loss.item() == pytest.approx(-(1.2 + 0.5 + 1.0) / 3, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(1 / 3)
    assert metrics["ratio_mean"] == pytest.approx(1.0)


def test_negative_advantage_clips_ratios_below_one_minus_eps_low():
    lp, old = _lp([[1.5, 0.5]])
    loss, metrics = policy_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 2))
    # -min(-1.5, -1.2) = 1.5 and -min(-0.5, -0.8) = 0.8
    assert loss.item() == pytest.approx((1.5 + 0.8) / 2, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(0.5)


def test_asymmetric_clip_uses_eps_high_for_the_upper_side():
    lp, old = _lp([[1.25]])
    loss, _ = policy_loss(lp, old, torch.tensor([2.0]), torch.ones(1, 1), eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(-1.25 * 2.0, abs=1e-6)  # 1.25 < 1.28: not clipped


def test_clipped_tokens_get_no_gradient_and_unclipped_ones_do():
    lp, old = _lp([[1.5, 1.1]])
    lp.requires_grad_(True)
    loss, _ = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0
    assert lp.grad[0, 1].item() == pytest.approx(-1.1 / 2, abs=1e-6)  # d/dlp of -exp(lp)/2


def test_masked_tokens_do_not_count_in_the_average():
    lp, old = _lp([[1.0, 100.0], [1.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    loss, metrics = policy_loss(lp, old, torch.tensor([1.0, 3.0]), mask)
    assert loss.item() == pytest.approx(-(1.0 + 3.0 + 3.0) / 3, abs=1e-6)
    assert metrics["clip_fraction"] == 0.0


def test_kl_is_the_k3_estimate_weighted_by_beta():
    lp = torch.zeros(1, 2)
    ref = torch.log(torch.tensor([[2.0, 1.0]]))  # ref - lp = ln 2 on the first token, 0 on the second
    loss, metrics = policy_loss(lp, lp.clone(), torch.tensor([0.0]), torch.ones(1, 2), ref_logprobs=ref, beta=0.1)
    k3 = 2.0 - math.log(2.0) - 1.0
    assert metrics["kl"] == pytest.approx(k3 / 2, abs=1e-6)
    assert loss.item() == pytest.approx(0.1 * k3 / 2, abs=1e-6)


def test_kl_is_reported_but_adds_nothing_when_beta_is_zero():
    lp = torch.zeros(1, 1)
    ref = torch.log(torch.tensor([[2.0]]))
    loss, metrics = policy_loss(lp, lp.clone(), torch.tensor([0.0]), torch.ones(1, 1), ref_logprobs=ref)
    assert metrics["kl"] > 0
    assert loss.item() == 0.0


def test_a_near_tie_stays_a_small_advantage_under_the_default_config():
    # Two answers a judge scored 0.80 and 0.81 differ by noise; std scaling (the old default) made them ±1.
    from training.config import GRPOConfig
    from training.rl.groups import apply_scores
    from training.types import Scenario, Trajectory, TrajectoryGroup

    answer = [{"role": "assistant", "content": "an answer"}]
    group = TrajectoryGroup(Scenario("s", "hi"), [Trajectory("s", list(answer)), Trajectory("s", list(answer))])
    for t, r in zip(group.trajectories, [0.80, 0.81]):
        t.reward = r
    apply_scores(group, GRPOConfig())
    assert [t.advantage for t in group.trajectories] == pytest.approx([-0.005, 0.005], abs=1e-6)


def test_a_near_tie_stays_a_small_advantage_with_a_std_floor():
    # 0.80 vs 0.81 is judge noise: std scaling makes it ±1, a floor of 0.1 keeps it at ±0.05.
    assert group_advantages([0.80, 0.81], scale="std").tolist() == pytest.approx([-1.0, 1.0], abs=1e-3)
    assert group_advantages([0.80, 0.81], scale="std_floor", std_floor=0.1).tolist() == pytest.approx([-0.05, 0.05])
    # Above the floor it is plain std scaling.
    assert group_advantages([0.0, 1.0], scale="std_floor", std_floor=0.1).tolist() == pytest.approx([-1.0, 1.0])


def test_the_scaling_choices_are_explicit_and_stored_booleans_still_load():
    from training.config import GRPOConfig

    assert GRPOConfig(scale_rewards=True).scale_rewards == "std"
    assert GRPOConfig(scale_rewards=False).scale_rewards == "none"
    assert GRPOConfig.model_validate_json('{"scale_rewards": "none"}').scale_rewards == "none"
    with pytest.raises(ValueError, match="scale_rewards"):
        GRPOConfig(scale_rewards="max")
    with pytest.raises(ValueError, match="unknown advantage scaling"):
        group_advantages([0.0, 1.0], scale="max")
