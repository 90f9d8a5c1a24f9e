"""Agreement metrics against values computed by hand (the working is in the comments)."""
from __future__ import annotations

import math

import pytest

from judging import JudgeError, agreement


def test_a_group_with_one_swapped_pair_agrees_on_five_of_six_pairs() -> None:
    # ranks of a: [1, 3, 2, 4] vs b: [1, 2, 3, 4]; d² = 0+1+1+0 = 2 → ρ = 1 − 6·2/(4·15) = 0.8
    # pairs: only (1, 2) is discordant → τ = (5 − 1)/6
    g = agreement.compare_group([0.1, 0.4, 0.3, 0.9], [1, 2, 3, 4])
    assert (g.n, g.pairs, g.agreeing_pairs) == (4, 6, 5)
    assert g.pairwise == pytest.approx(5 / 6)
    assert g.spearman == pytest.approx(0.8)
    assert g.kendall_tau == pytest.approx(4 / 6)


def test_ties_use_average_ranks_and_tau_b() -> None:
    # a ties items 0 and 1: pairwise (0,1) disagrees (tie vs order) → 2/3
    # τ-b = (2 − 0)/sqrt((3 − 1)(3 − 0)) = 2/√6; ranks a = [1.5, 1.5, 3] vs [1, 2, 3] → ρ = 1.5/√(1.5·2) = √3/2
    g = agreement.compare_group([0.5, 0.5, 1.0], [1, 2, 3])
    assert g.pairwise == pytest.approx(2 / 3)
    assert g.kendall_tau == pytest.approx(2 / math.sqrt(6))
    assert g.spearman == pytest.approx(math.sqrt(3) / 2)


def test_ties_in_both_sets_count_as_agreement() -> None:
    g = agreement.compare_group([0.5, 0.5], [0.2, 0.2])
    assert g.pairwise == 1.0


def test_perfectly_reversed_rankings_score_minus_one() -> None:
    g = agreement.compare_group([0.1, 0.2, 0.3], [0.9, 0.5, 0.1])
    assert (g.pairwise, g.spearman, g.kendall_tau) == (0.0, pytest.approx(-1.0), pytest.approx(-1.0))


def test_a_constant_score_set_has_no_correlation() -> None:
    g = agreement.compare_group([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])
    assert g.spearman is None and g.kendall_tau is None
    assert g.pairwise == 0.0  # every pair is a tie on one side only


def test_a_group_of_one_is_undefined() -> None:
    g = agreement.compare_group([0.5], [0.1])
    assert (g.pairs, g.pairwise, g.spearman, g.kendall_tau) == (0, None, None, None)


def test_items_without_a_score_are_left_out() -> None:
    g = agreement.compare_group([0.1, 0.4, None, 0.9], [1, 2, 3, None])
    assert g.n == 2 and g.pairs == 1 and g.pairwise == 1.0


def test_overall_pools_pairs_and_averages_the_defined_correlations() -> None:
    report = agreement.compare(
        [[0.1, 0.4, 0.3, 0.9], [0.5, 0.5, 1.0], [0.7, 0.7]],
        [[1, 2, 3, 4], [1, 2, 3], [0.1, 0.3]],
    )
    # pairs: 5/6 + 2/3 + 0/1 (tie vs order) → 7/10
    assert report.pairwise == pytest.approx(7 / 10)
    assert report.spearman == pytest.approx((0.8 + math.sqrt(3) / 2) / 2)
    assert report.kendall_tau == pytest.approx((4 / 6 + 2 / math.sqrt(6)) / 2)
    assert report.groups_with_spearman == 2 and report.groups_with_kendall == 2
    assert len(report.groups) == 3


def test_nothing_comparable_gives_none_not_zero() -> None:
    report = agreement.compare([[0.5]], [[0.1]])
    assert (report.pairwise, report.spearman, report.kendall_tau) == (None, None, None)


def test_mismatched_shapes_are_a_judge_error() -> None:
    with pytest.raises(JudgeError, match="2 groups vs 1"):
        agreement.compare([[0.1, 0.2], [0.3, 0.4]], [[0.1, 0.2]])
    with pytest.raises(JudgeError, match="different sizes"):
        agreement.compare([[0.1, 0.2]], [[0.1, 0.2, 0.3]])
