"""A/A calibration of the held-out win rate: the base model evaluated against itself, over many seeds.

    python -m bench.eval_calibration [--seeds 20] [--held-out 24] [--samples 4]

The real evaluation path (`training.monitoring.evaluation.Evaluator`) on the offline demo's task: the tiny model
(built under var/tiny-model when missing) on the run's inference server, both sides the base model, scored as the demo scores
offline, by the 2048 game's own reward. Nothing here is scripted: the server samples at the demo's temperature
(1.0, no sampling seed), so two answers to one board differ and so do their rewards; only the board is fixed per
scenario. The true win rate is 0.5 by symmetry, so a 95 % interval should cover 0.5 in about 95 % of the seeds.

Each seed evaluates twice, as a run does at successive steps. Printed: how many intervals cover 0.5, for the
evaluation's bootstrap over scenarios and for the Wilson interval over pairs it replaced; the mean win rate with
its standard error; the mean interval width; and, for the choice of base answers, the correlation of the two
evaluations' win rates when the second reuses the first's base answers (the old behaviour; with the game's reward
an answer's score does not depend on its group, so this is computed exactly from the same answers) and when they
are sampled afresh (now).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from training.environments import RolloutConfig, get_environment, parse_options
from training.fixtures.demo import HELD_OUT, demo_config
from training.fixtures.tiny_model import ensure_tiny_model
from training.monitoring.evaluation import (EvaluationConfig, Evaluator, ScenarioComparison, pair_wins,
                                            wilson_interval, win_rate_summary)
from training.rl.loop import load_scenarios
from training.servers import start_server
from training.types import env_reward_scorer

ROOT = Path(__file__).resolve().parents[1]


def _covers(low: float, high: float) -> bool:
    return low <= 0.5 <= high


def _reuse_base(second: list[dict], first: list[dict]) -> list[ScenarioComparison]:
    """The second evaluation as the old code ran it: its checkpoint answers against the first's base answers."""
    base = {s["scenario_id"]: s["base_rewards"] for s in first}
    out = []
    for s in second:
        if s["scenario_id"] in base:
            mine, theirs = s["checkpoint_rewards"], base[s["scenario_id"]]
            out.append(ScenarioComparison(s["scenario_id"], pair_wins(mine, theirs), len(mine) * len(theirs),
                                          mine, theirs))
    return out


def _corr(xs: list[float], ys: list[float]) -> float:
    return statistics.correlation(xs, ys) if len(xs) > 2 and statistics.pstdev(xs) and statistics.pstdev(ys) else 0.0


async def calibrate(seeds: int, held_out: int, samples: int, out: Path) -> dict:
    config = demo_config(out_dir=out, model_dir=ensure_tiny_model(ROOT / "var" / "tiny-model"), held_out=held_out)
    scenarios = [s for s in load_scenarios(config) if s.id in set(config.evaluation.held_out_ids)]
    env = get_environment(config.environment.kind)
    options = parse_options(env, config.environment.options)
    rollout_config = RolloutConfig(config.system_prompt, config.sampling, options)
    eval_config = EvaluationConfig(held_out_ids=[s.id for s in scenarios], samples=samples)
    out.mkdir(parents=True, exist_ok=True)
    server = start_server(config.server, config.base_model, out / "server.log")
    rows = []
    started = time.monotonic()
    try:
        client, base = server.async_client(), server.model_name
        for seed in range(seeds):
            evaluator = Evaluator(config=eval_config, held_out=scenarios, env=env, rollout_config=rollout_config,
                                  scorer=env_reward_scorer, total_steps=2, seed=seed)
            first = await evaluator.evaluate(1, client, model=base, base_model=base)
            second = await evaluator.evaluate(2, client, model=base, base_model=base)
            reused = win_rate_summary(_reuse_base(second["scenarios"], first["scenarios"]))
            rows.append({"first": first, "second": second, "reused": reused["eval_win_rate"],
                         "wilson": wilson_interval(sum(s["wins"] for s in first["scenarios"]),
                                                   first["eval_comparisons"])})
            print(f"seed {seed + 1}/{seeds}: win rate {first['eval_win_rate']:.3f} "
                  f"[{first['eval_ci_low']:.3f}, {first['eval_ci_high']:.3f}]  wilson "
                  f"[{rows[-1]['wilson'][0]:.3f}, {rows[-1]['wilson'][1]:.3f}]  "
                  f"{time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    finally:
        server.stop()
    rates = [r["first"]["eval_win_rate"] for r in rows]
    pairs = [(a, b) for r in rows for s in r["first"]["scenarios"]
             for a in s["checkpoint_rewards"] for b in s["base_rewards"]]
    return {
        "seeds": seeds, "scenarios": held_out, "samples": samples, "seconds": round(time.monotonic() - started),
        "bootstrap_covers": sum(_covers(r["first"]["eval_ci_low"], r["first"]["eval_ci_high"]) for r in rows),
        "wilson_covers": sum(_covers(*r["wilson"]) for r in rows),
        "mean_win_rate": statistics.fmean(rates), "sd_win_rate": statistics.stdev(rates),
        "se_mean_win_rate": statistics.stdev(rates) / len(rates) ** 0.5,
        "bootstrap_width": statistics.fmean(r["first"]["eval_ci_high"] - r["first"]["eval_ci_low"] for r in rows),
        "wilson_width": statistics.fmean(r["wilson"][1] - r["wilson"][0] for r in rows),
        "tied_pairs": sum(abs(a - b) <= 1e-9 for a, b in pairs) / len(pairs),
        "corr_reused_base": _corr(rates, [r["reused"] for r in rows]),
        "corr_fresh_base": _corr(rates, [r["second"]["eval_win_rate"] for r in rows]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--held-out", type=int, default=HELD_OUT, help="held-out scenarios (default: the demo's)")
    parser.add_argument("--samples", type=int, default=4, help="answers per side per scenario")
    parser.add_argument("--out", default=str(ROOT / "var" / "eval-calibration"))
    args = parser.parse_args(argv)
    r = asyncio.run(calibrate(args.seeds, args.held_out, args.samples, Path(args.out)))
    print(f"A/A: the base model against itself, {r['seeds']} seeds x {r['scenarios']} scenarios x {r['samples']} "
          f"answers a side ({r['seconds']} s; {r['tied_pairs']:.0%} of pairs tied)")
    print(f"95 % interval covers 0.5: bootstrap over scenarios {r['bootstrap_covers']}/{r['seeds']} "
          f"(mean width {r['bootstrap_width']:.3f}); Wilson over pairs {r['wilson_covers']}/{r['seeds']} "
          f"(mean width {r['wilson_width']:.3f})")
    print(f"mean win rate {r['mean_win_rate']:.3f} +- {r['se_mean_win_rate']:.3f} (standard error; sd across seeds "
          f"{r['sd_win_rate']:.3f})")
    print(f"correlation of two evaluations' win rates: base answers reused {r['corr_reused_base']:+.2f}, "
          f"sampled afresh {r['corr_fresh_base']:+.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
