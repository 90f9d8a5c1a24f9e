"""Which advantage scaling learns best from a noisy judge: the 2048 demo scored by env reward + judge noise.

    python -m bench.advantage_bench [--steps 30] [--seeds 0 1] [--noise 0.1]

A judge double stands in for the judge: each trajectory's score is its env reward plus seeded gaussian noise,
clipped to [0, 1] as a judge's scores are. Each scaling choice (none = Dr. GRPO, std, std_floor) trains the demo
from the same seeds; the learning curve is read on the *true* env reward, which the noise hides from training.
Printed: mean env reward over the first and last 10 steps per choice, averaged over seeds, as ratios to `std`.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from training import run
from training.fixtures.demo import demo_config
from training.fixtures.tiny_model import ensure_tiny_model
from training.types import Score, TrajectoryGroup

ROOT = Path(__file__).resolve().parents[1]
CHOICES = ("none", "std", "std_floor")


def noisy_judge(noise: float, seed: int):
    rng = random.Random(seed)

    async def score(group: TrajectoryGroup) -> list[Score]:
        return [Score(reward=min(1.0, max(0.0, (t.env_reward or 0.0) + rng.gauss(0.0, noise))))
                for t in group.trajectories]

    return score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--noise", type=float, default=0.1)
    args = parser.parse_args(argv)
    model_dir = ensure_tiny_model(ROOT / "var" / "tiny-model")
    curves: dict[str, list[list[float]]] = {c: [] for c in CHOICES}
    for seed in args.seeds:
        for choice in CHOICES:
            out = ROOT / "var" / "bench" / "advantage" / f"{choice}-{seed}"
            data = demo_config(out_dir=out, steps=args.steps, model_dir=model_dir).model_dump()
            data["grpo"]["scale_rewards"], data["seed"] = choice, seed
            from training.config import RunConfig

            summary = run(RunConfig.model_validate(data), scorer=noisy_judge(args.noise, seed))
            curves[choice].append([h["env_mean"] for h in summary.history])
            print(f"[advantage_bench] seed {seed} {choice}: "
                  f"{[round(v, 2) for v in curves[choice][-1]]}", file=sys.stderr, flush=True)
    window = min(10, args.steps // 2)
    rows = {}
    for choice, runs in curves.items():
        first = statistics.fmean(statistics.fmean(c[:window]) for c in runs)
        last = statistics.fmean(statistics.fmean(c[-window:]) for c in runs)
        rows[choice] = {"first": first, "last": last, "gain": last - first}
    base = rows["std"]["gain"]
    print(f"noisy judge: env reward + N(0, {args.noise}), {args.steps} steps, seeds {args.seeds}")
    print(f"{'scaling':<11}{'first ' + str(window):>10}{'last ' + str(window):>10}{'gain':>8}{'gain/std':>10}")
    for choice, r in rows.items():
        ratio = r["gain"] / base if base else float("nan")
        print(f"{choice:<11}{r['first']:>10.3f}{r['last']:>10.3f}{r['gain']:>8.3f}{ratio:>10.2f}")
    results = ROOT / "bench" / "results" / "advantage_bench.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"args": vars(args), "curves": curves, "summary": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
