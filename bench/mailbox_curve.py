"""Does the mailbox demo's held-out success rate rise over the run? The curve, measured against the base.

    python -m bench.mailbox_curve [--steps 20] [--seeds 0 1] [--every 5] [--samples 4] [--out FILE.json]
                                  [--grpo '{"epochs_per_step": 4}'] [--override '{"trainer": {"dtype": "float32"}}']
                                  [--server-url http://127.0.0.1:8765/mcp]
    python -m bench.mailbox_curve --pool EVENTS.jsonl... [--from-step 18]

Runs `python -m training demo --task mailbox` in-process for each seed: the tiny mailbox model
(training/fixtures/tiny_mailbox_model.py) against the example mailbox server over stdio, trained on the verifiable
`reference` reward of the 80 train scenarios. Every `--every` steps (and after the last) the
held-out evaluation (training/monitoring/evaluation.py) has the checkpoint and the base (adapter off) each answer the 20
held-out scenarios `--samples` times. Printed per evaluation: the mean reference reward of either side, their
success rate (a reward above 0.5: the answer contains the reference; sources alone give 0.25) and the win rate
against the base with its 95 % bootstrap interval over scenarios. The base is sampled afresh each time, so its
column shows the noise of one evaluation.

`--pool` reads the evaluations of earlier runs' `--events` files (any settings, any machine) and pools them: per
evaluation step, the success of the checkpoints and of the base over all their answers; then the checkpoints from
`--from-step` on against the base of the same evaluations, paired by scenario, with a 95 % bootstrap interval of
the difference in success rate over the 20 held-out scenarios.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from training import run
from training.events import EvaluationFinished, Event, StepFinished
from training.fixtures.demo import mailbox_demo_config
from training.fixtures.tiny_mailbox_model import ensure_tiny_mailbox_model

ROOT = Path(__file__).resolve().parents[1]
SUCCESS = 0.5  # a reference reward above it means the answer contained the reference


def _rate(rewards: list[float]) -> float | None:
    return sum(r > SUCCESS for r in rewards) / len(rewards) if rewards else None


def point(event: EvaluationFinished) -> dict:
    mine = [r for s in event.scenarios for r in s["checkpoint_env"]]
    base = [r for s in event.scenarios for r in s["base_env"]]
    m = event.metrics
    return {"step": event.step, "reward_checkpoint": m["eval_env_checkpoint"], "reward_base": m["eval_env_base"],
            "success_checkpoint": _rate(mine), "success_base": _rate(base), "answers_a_side": len(mine),
            "win_rate": m["eval_win_rate"], "ci": [m["eval_ci_low"], m["eval_ci_high"]]}


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _merged(base: dict, over: dict) -> dict:
    """`over` on `base`, dictionaries merged key by key; any other value (a list, None) replaces."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _fmt(v: float | None) -> str:
    return "  n/a" if v is None else f"{v:5.3f}"


def pool(paths: list[str], from_step: int, resamples: int = 4000) -> None:
    import random
    from collections import defaultdict

    evaluations = [e for path in paths for e in map(json.loads, Path(path).read_text().splitlines())
                   if e.get("kind") == "evaluation"]
    # Checkpoint successes, answers; base successes, answers: per step, and per scenario from `from_step` on.
    by_step: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    later: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for e in evaluations:
        for s in e["scenarios"]:
            counts = [sum(r > SUCCESS for r in s["checkpoint_env"]), len(s["checkpoint_env"]),
                      sum(r > SUCCESS for r in s["base_env"]), len(s["base_env"])]
            rows = [by_step[e["step"]]] + ([later[s["scenario_id"]]] if e["step"] >= from_step else [])
            for row in rows:
                for i, c in enumerate(counts):
                    row[i] += c
    print(f"{len(evaluations)} evaluations from {len(paths)} runs")
    print("step  evaluations  success ckpt  success base  answers a side")
    for step, (cw, cn, bw, bn) in sorted(by_step.items()):
        count = sum(e["step"] == step for e in evaluations)
        print(f"{step:4d}  {count:11d}  {cw / cn:12.3f}  {bw / bn:12.3f}  {cn:14d}")

    def difference(ids: list[str]) -> float:
        rows = [later[i] for i in ids]
        return sum(r[0] for r in rows) / sum(r[1] for r in rows) - sum(r[2] for r in rows) / sum(r[3] for r in rows)

    ids = sorted(later)
    if not ids:
        print(f"no evaluation at step {from_step} or later")
        return
    rng = random.Random(0)
    draws = sorted(difference([rng.choice(ids) for _ in ids]) for _ in range(resamples))
    print(f"checkpoints from step {from_step} on minus the base, success rate: {difference(ids):+.3f} "
          f"[{draws[int(0.025 * resamples)]:+.3f}, {draws[int(0.975 * resamples)]:+.3f}] (95 % bootstrap over "
          f"{len(ids)} scenarios, {sum(later[i][1] for i in ids)} answers a side)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--model-dir", default=str(ROOT / "var" / "tiny-mailbox-model"))
    parser.add_argument("--out", help="also write the curves as JSON here")
    parser.add_argument("--runs-dir", default=str(ROOT / "var" / "bench" / "mailbox"),
                        help="each seed's run goes to RUNS_DIR/seed-N, emptied first (a left-over run would resume)")
    parser.add_argument("--events", help="also append every engine event to this file, one JSON line each (the "
                                          "groups' trajectories: what the agent did)")
    parser.add_argument("--grpo", type=json.loads, default={},
                        help="GRPO settings over the demo's, as JSON (a sweep: learning_rate, epochs_per_step, ...)")
    parser.add_argument("--override", type=json.loads, default={},
                        help="any run settings over the demo's, as JSON merged section by section (trainer, lora, ...)")
    parser.add_argument("--server-url", help="use the mailbox server already serving over streamable HTTP at this URL "
                                             "(python -m training.environments.mailbox_server --transport http): "
                                             "one server for every trajectory instead of a process each")
    parser.add_argument("--pool", nargs="+", metavar="EVENTS", help="pool the evaluations of these --events files "
                                                                     "(no run)")
    parser.add_argument("--from-step", type=int, default=1, help="--pool: compare the checkpoints from this step on")
    args = parser.parse_args(argv)
    if args.pool:
        pool(args.pool, args.from_step)
        return 0
    if args.grpo:
        args.override = _merged(args.override, {"grpo": args.grpo})
    model_dir = ensure_tiny_mailbox_model(args.model_dir)
    curves: dict[int, list[dict]] = {}
    for seed in args.seeds:
        points: list[dict] = []
        train_rewards: list[float] = []

        def sink(event: Event) -> None:
            if args.events:
                with open(args.events, "a") as f:
                    f.write(json.dumps({"seed": seed, **event.to_dict()}) + "\n")
            if isinstance(event, EvaluationFinished):
                points.append(point(event))
                p = points[-1]
                print(f"[mailbox_curve] seed {seed} step {p['step']:3d}: reward {_fmt(p['reward_checkpoint'])} vs "
                      f"base {_fmt(p['reward_base'])}  success {_fmt(p['success_checkpoint'])} vs base "
                      f"{_fmt(p['success_base'])}  win rate {_fmt(p['win_rate'])} [{_fmt(p['ci'][0])}, "
                      f"{_fmt(p['ci'][1])}]", file=sys.stderr, flush=True)
            elif isinstance(event, StepFinished):
                train_rewards.append(event.metrics.get("env_mean") or 0.0)
                print(f"[mailbox_curve] seed {seed} step {event.step}: train reward {train_rewards[-1]:.3f}",
                      file=sys.stderr, flush=True)

        out_dir = Path(args.runs_dir) / f"seed-{seed}"
        shutil.rmtree(out_dir, ignore_errors=True)
        config = mailbox_demo_config(out_dir=out_dir, steps=args.steps,
                                     model_dir=model_dir, seed=seed, eval_every=args.every,
                                     eval_samples=args.samples)
        # Validated as the run config validates it: an unknown key is an error, not ignored.
        settings = _merged(config.model_dump(), args.override)
        if args.server_url:
            settings["environment"]["options"]["server"] = {"transport": "http", "url": args.server_url}
        config = config.model_validate(settings)
        run(config, sink=sink)
        curves[seed] = points
        print(json.dumps({"seed": seed, "train_reward": train_rewards, "curve": points}), flush=True)
    steps = sorted({p["step"] for ps in curves.values() for p in ps})
    print("step  reward ckpt  reward base  success ckpt  success base  (mean over seeds)")
    for step in steps:
        at = [p for ps in curves.values() for p in ps if p["step"] == step]
        # An evaluation whose every rollout failed has no numbers (None): left out of the mean, not a crash.
        cols = [_mean([p[k] for p in at]) for k in ("reward_checkpoint", "reward_base", "success_checkpoint",
                                                    "success_base")]
        print(f"{step:4d}  {_fmt(cols[0]):>11}  {_fmt(cols[1]):>11}  {_fmt(cols[2]):>12}  {_fmt(cols[3]):>12}")
    # The base is the same model at every evaluation, sampled afresh: pooled, its rate has a smaller noise than
    # any one evaluation's, and each checkpoint row compares with it.
    pooled = [_mean([p[k] for ps in curves.values() for p in ps]) for k in ("reward_base", "success_base")]
    print(f" all  {'':>11}  {_fmt(pooled[0]):>11}  {'':>12}  {_fmt(pooled[1]):>12}  (the base pooled over evaluations)")
    if args.out:
        Path(args.out).write_text(json.dumps(curves, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
