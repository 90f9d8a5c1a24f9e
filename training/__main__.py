"""The engine's command line (no Django needed).

  python -m training build-tiny-model DIR           build the tiny offline model
  python -m training run --config FILE.json         train; one JSON object per step on stdout
  python -m training demo --steps N --out DIR       the offline demo (tiny model, local server, 2048)
  python -m training demo --task mailbox            the same with the mailbox MCP server over stdio
  python -m training evaluate --config FILE.json [--checkpoint DIR] [--baseline DIR]
                                                    held-out evaluation of a checkpoint against the base model

Progress goes to stderr; stdout carries only the step records and one record per held-out evaluation
(`"kind": "evaluation"`, with `step` and `eval_win_rate`), so it can be piped into a file or `jq`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from training.config import RunConfig, load_run_config
from training.errors import TrainingError
from training.evaluation import verdict
from training.events import (Event, EvaluationFinished, GroupScored, MonitorAlert, RunFailed, RunStarted,
                             StepFinished)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _verdict(metrics: dict) -> str:
    said = verdict(metrics.get("eval_ci_low"), metrics.get("eval_ci_high"))
    return {"better": "better than base", "worse": "worse than base",
            "undecided": "not distinguishable from base"}.get(said or "", "nothing compared")


class ConsoleReporter:
    """Prints one JSON record per finished step on stdout and a live progress line on stderr."""

    def __init__(self, total_steps: int) -> None:
        self.total = total_steps
        self.first_step = 1
        self.started = time.monotonic()
        self.groups: list[dict[str, Any]] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.first_step, self.started = event.start_step, time.monotonic()
            resumed = f" (resumed at step {event.start_step})" if event.resumed else ""
            print(f"run {event.run_name}: {event.total_steps} steps{resumed}", file=sys.stderr, flush=True)
        elif isinstance(event, GroupScored):
            self.groups.append({
                "scenario_id": event.scenario_id, "skipped": event.skipped, "errors": event.errors,
                "scoring_error": event.scoring_error,
                "rewards": [t["reward"] for t in event.trajectories],
                "judge_scores": [t["judge_score"] for t in event.trajectories],
                "explanations": [t["explanation"] for t in event.trajectories],
            })
        elif isinstance(event, StepFinished):
            record = {**event.metrics, "groups": self.groups}
            self.groups = []
            print(json.dumps(record), flush=True)
            done = event.step - self.first_step + 1
            eta = (time.monotonic() - self.started) / done * (self.total - event.step)
            print(f"step {event.step}/{self.total}  reward {_fmt(event.metrics.get('reward_mean'))}  "
                  f"loss {_fmt(event.metrics.get('loss'))}  ETA {eta:.0f}s", file=sys.stderr, flush=True)
        elif isinstance(event, EvaluationFinished):  # one JSON line per held-out evaluation
            print(json.dumps({"kind": "evaluation", "step": event.step, **event.metrics}), flush=True)
            m = event.metrics
            print(f"evaluation at step {event.step}: win rate vs base {_fmt(m['eval_win_rate'])} "
                  f"[{_fmt(m['eval_ci_low'])}, {_fmt(m['eval_ci_high'])}] over {m['eval_scenarios']} scenarios x "
                  f"{m['eval_samples']} answers a side ({_verdict(m)})  env {_fmt(m['eval_env_checkpoint'])} "
                  f"vs {_fmt(m['eval_env_base'])}", file=sys.stderr, flush=True)
        elif isinstance(event, MonitorAlert):
            pause = " (the web app would pause the run)" if event.pause else ""
            print(f"alert at step {event.step}: {event.monitor}: {event.message}{pause}", file=sys.stderr, flush=True)
        elif isinstance(event, RunFailed):
            print(f"run failed at step {event.step}: {event.error}", file=sys.stderr, flush=True)


def load_scorer(config: RunConfig):
    """The judge scorer, found through the `rubric_studio.scorers` entry point (training never imports it)."""
    if config.judge is None:
        return None
    found = {ep.name: ep for ep in entry_points(group="rubric_studio.scorers")}
    if "judge" not in found:
        raise TrainingError("the config has a `judge` section but no judge scorer is installed "
                            "(entry point rubric_studio.scorers:judge; install the project with `make venv`)")
    try:
        return found["judge"].load()(config.judge)
    except Exception as err:  # the judge's own errors (bad options, missing key) name the problem
        raise TrainingError(f"invalid judge section: {err}") from None


def run_config(config: RunConfig) -> int:
    from training.loop import run

    summary = run(config, scorer=load_scorer(config), sink=ConsoleReporter(config.steps))
    print(f"run {summary.status}: {summary.steps_done} steps; checkpoints in {config.output_dir}/checkpoints",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-tiny-model", help="build the tiny offline model into DIR")
    build.add_argument("dir")
    build.add_argument("--seed", type=int, default=0)
    run_p = sub.add_parser("run", help="train from a JSON run config")
    run_p.add_argument("--config", required=True)
    demo = sub.add_parser("demo", help="the offline demo: the tiny model learns 2048 moves (or the mailbox)")
    demo.add_argument("--task", choices=["2048", "mailbox"], default="2048",
                      help="mailbox: the tiny mailbox model uses the example mailbox MCP server over stdio")
    demo.add_argument("--steps", type=int, default=None, help="default: 30 (2048), 20 (mailbox)")
    demo.add_argument("--out", default=None, help="default: var/demo (2048), var/demo-mailbox (mailbox)")
    demo.add_argument("--model-dir", default=None, help="built first if missing; default: var/tiny-model "
                      "(2048), var/tiny-mailbox-model (mailbox)")
    demo.add_argument("--seed", type=int, default=0, help="the mailbox run's seed")
    evaluate = sub.add_parser("evaluate", help="held-out evaluation of a checkpoint against the base model")
    evaluate.add_argument("--config", required=True, help="a run config with an `evaluation` section")
    evaluate.add_argument("--checkpoint", help="a checkpoint directory (default: the base against itself)")
    evaluate.add_argument("--baseline", help="compare with this earlier checkpoint instead of the base model")
    args = parser.parse_args(argv)
    try:
        if args.command == "build-tiny-model":
            from training.tiny_model import build_tiny_model

            build_tiny_model(Path(args.dir), seed=args.seed)
            return 0
        if args.command == "run":
            from training.preflight import preflight

            config = load_run_config(args.config)
            if problems := preflight(config):  # fail in a second, not after the server started
                raise TrainingError("; ".join(problems))
            return run_config(config)
        if args.command == "evaluate":
            import asyncio

            from training.checks import evaluate_checkpoint

            config = load_run_config(args.config)
            asyncio.run(evaluate_checkpoint(config, args.checkpoint, scorer=load_scorer(config),
                                            sink=ConsoleReporter(config.steps), baseline=args.baseline))
            return 0
        if args.task == "mailbox":
            from training.demo import mailbox_demo_config
            from training.tiny_mailbox_model import ensure_tiny_mailbox_model

            model_dir = args.model_dir or "var/tiny-mailbox-model"
            ensure_tiny_mailbox_model(model_dir)
            return run_config(mailbox_demo_config(out_dir=args.out or "var/demo-mailbox", steps=args.steps or 20,
                                                  model_dir=model_dir, seed=args.seed))
        from training.demo import demo_config
        from training.tiny_model import ensure_tiny_model

        model_dir = args.model_dir or "var/tiny-model"
        ensure_tiny_model(model_dir)
        return run_config(demo_config(out_dir=args.out or "var/demo", steps=args.steps or 30, model_dir=model_dir))
    except TrainingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
