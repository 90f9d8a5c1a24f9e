"""The judge check on a fixed set of groups, against judge doubles with known biases (real litellm, real HTTP)."""
from __future__ import annotations

import asyncio
import json

from judging.bias import judge_check, pair_flips
from judging.cli import main
from tests.judge_double import JudgeDouble
from tests.judging.groups import quality_rule, trajectory

# 4 groups of 4 answers with distinct qualities, in a fixed stored order (best first in two, last in two)
QUALITIES = [[0.9, 0.7, 0.5, 0.3], [0.2, 0.4, 0.6, 0.8], [0.6, 0.9, 0.3, 0.45], [0.35, 0.15, 0.75, 0.55]]
GROUPS = [[trajectory(q, tag=f"g{g}a{i}") for i, q in enumerate(qs)] for g, qs in enumerate(QUALITIES)]


def _check(double: JudgeDouble, **options):
    return asyncio.run(judge_check(GROUPS, double.model, extra_litellm_params=double.litellm_params,
                                   backoff_s=0.0, **options))


def test_pair_flips_counts_reversed_pairs_and_half_for_a_one_sided_tie():
    assert pair_flips([3, 2, 1], [3, 2, 1]) == (0, 3)
    assert pair_flips([3, 2, 1], [1, 2, 3]) == (3, 3)
    assert pair_flips([2, 2, 1], [3, 2, 1]) == (0.5, 3)


def test_an_unbiased_judge_shows_no_flips_full_consistency_and_no_length_bias(judge_double):
    judge_double.responder = JudgeDouble.score_by(quality_rule)
    report = _check(judge_double, passes=3)
    assert report.groups == 4 and report.pairs == 24
    assert report.flips_single == 0 and report.flips_multi == 0 and report.self_consistency == 1.0
    assert report.multi_pass_halves_flips is None


def test_a_first_position_judge_flips_ranks_and_multi_pass_scoring_halves_the_flips(judge_double):
    """Measured on these groups (bonus 0.3 for the first answer shown): 1 pass flips 9 of 24 pairs between the
    stored and the reversed order; the judge's multi-pass scoring 6 with 2 passes, 3 with 3, 1 with 6.
    The shuffles are seeded, so these numbers are reproducible; an unbiased judge flips none (test above)."""
    judge_double.responder = JudgeDouble.prefer_first(quality_rule, bonus=0.3)
    report = _check(judge_double, passes=3)
    assert report.flips_single >= 6, report
    assert report.flips_multi <= report.flips_single / 2 and report.multi_pass_halves_flips is True, report
    assert report.self_consistency is not None and report.self_consistency < 1.0


def test_a_judge_that_rewards_length_shows_length_bias(judge_double):
    def by_length(text: str) -> float:
        return min(1.0, len(text) / 200)

    long_groups = [[[*g[i][:-1], {"role": "assistant", "content": "word " * (5 + 7 * i)}] for i in range(3)]
                   for g in GROUPS[:2]]
    judge_double.responder = JudgeDouble.score_by(by_length)
    report = asyncio.run(judge_check(long_groups, judge_double.model, passes=2,
                                     extra_litellm_params=judge_double.litellm_params, backoff_s=0.0))
    assert report.length_correlation == 1.0


def test_the_cli_check_prints_the_flips(judge_double, tmp_path, capsys):
    judge_double.responder = JudgeDouble.prefer_first(quality_rule, bonus=0.3)
    path = tmp_path / "groups.jsonl"
    path.write_text("".join(json.dumps({"id": f"g{i}", "trajectories": g}) + "\n" for i, g in enumerate(GROUPS)))
    code = main(["check", str(path), "--judge-model", judge_double.model, "--api-base", judge_double.api_base,
                 "--passes", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["pairs"] == 24 and out["flips_multi"] < out["flips_single"]
