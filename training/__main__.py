"""The engine's command line (no Django needed).

  python -m training build-tiny-model DIR           build the tiny offline model
  python -m training run --config FILE.json         train; one JSON object per step on stdout
  python -m training sft --config FILE.json         supervised fine-tuning on conversations (kind "sft")
  python -m training demo --steps N --out DIR       the offline demo (tiny model, local server, 2048)
  python -m training demo --task mailbox            the same with the mailbox MCP server over stdio
  python -m training demo --task sft                teach (distil a scripted teacher, SFT), then reinforce
  python -m training evaluate --config FILE.json [--checkpoint DIR] [--baseline DIR]
                                                    held-out evaluation of a checkpoint against the base model
  python -m training export-merged --base BASE --adapter DIR --out DIR
                                                    a checkpoint merged into its base (safetensors + tokenizer)
  python -m training plan --config FILE.json [--gpu-gib 80 [--gpu-count 2]] [--json]
                                                    the run's memory plan per GPU (this machine's GPUs, or
                                                    GPUs of the size given); exit 1 when it does not fit

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
from training.events import (EvaluationFinished, Event, GroupScored, HeldOutLoss, MemoryPlanned, MonitorAlert,
                             RunFailed, RunStarted, StepFinished)
from training.monitoring.evaluation import verdict
from training.types import TrainingError


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
            self.total = event.total_steps  # an SFT run's steps follow from its data
            resumed = f" (resumed at step {event.start_step})" if event.resumed else ""
            print(f"run {event.run_name}: {event.total_steps} steps{resumed}", file=sys.stderr, flush=True)
        elif isinstance(event, MemoryPlanned):  # how vLLM and the trainer share the GPUs (docs/gpu.md)
            print("\n".join(event.lines), file=sys.stderr, flush=True)
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
            m = event.metrics
            progress = f"reward {_fmt(m.get('reward_mean'))}" if "reward_mean" in m else \
                f"lr {m.get('learning_rate', 0):.2e}  tokens/s {m.get('tokens_per_s') or 0:.0f}"  # an SFT step
            print(f"step {event.step}/{self.total}  {progress}  loss {_fmt(m.get('loss'))}  ETA {eta:.0f}s",
                  file=sys.stderr, flush=True)
        elif isinstance(event, HeldOutLoss):
            print(f"held-out loss at step {event.step}: {_fmt(event.loss)} over {event.conversations} conversations "
                  f"({event.tokens} tokens)", file=sys.stderr, flush=True)
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
    from training import run

    summary = run(config, scorer=load_scorer(config), sink=ConsoleReporter(config.steps))
    print(f"run {summary.status}: {summary.steps_done} steps; checkpoints in {config.output_dir}/checkpoints",
          file=sys.stderr)
    return 0


def print_plan(config: RunConfig, *, gpu_gib: float | None, gpu_count: int, as_json: bool) -> int:
    """Prints the memory plan; 1 when it does not fit, 0 otherwise (also without a GPU to judge against)."""
    from training.model.gpu.memory_plan import GiB, plan_memory, read_shape

    if gpu_gib is not None:
        if gpu_gib <= 0 or not 1 <= gpu_count <= 1024:
            raise TrainingError("--gpu-gib must be above 0 and --gpu-count between 1 and 1024")
        totals = [int(gpu_gib * GiB)] * gpu_count
    else:
        from training.model.gpu.sharing import read_gpus

        totals = [g.total for g in read_gpus()]
    result = plan_memory(config, read_shape(config.base_model), totals)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print("\n".join(result.lines()))
        if not totals:
            print("(no GPU here: pass --gpu-gib to plan for a card of that size)")
        if refusal := result.refusal():
            print(refusal)
    return 1 if result.fits is False else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build-tiny-model", help="build the tiny offline model into DIR")
    build.add_argument("dir")
    build.add_argument("--seed", type=int, default=0)
    run_p = sub.add_parser("run", help="train from a JSON run config")
    run_p.add_argument("--config", required=True)
    sft = sub.add_parser("sft", help="supervised fine-tuning on conversations (a run config of kind sft)")
    sft.add_argument("--config", required=True, help="a run config; `kind` may be left out (sft is assumed)")
    demo = sub.add_parser("demo", help="the offline demo: the tiny model learns 2048 moves (or the mailbox)")
    demo.add_argument("--task", choices=["2048", "mailbox", "sft"], default="2048",
                      help="mailbox: the tiny mailbox model uses the example mailbox MCP server over stdio; sft: "
                           "distil a scripted 2048 teacher, SFT on its best games, then GRPO from the SFT checkpoint "
                           "and from the base (docs/sft.md)")
    demo.add_argument("--steps", type=int, default=None, help="default: 30 (2048), 20 (mailbox; sft: GRPO steps)")
    demo.add_argument("--out", default=None, help="default: var/demo (2048), var/demo-mailbox (mailbox), "
                                                  "var/demo-sft (sft)")
    demo.add_argument("--model-dir", default=None, help="built first if missing; default: var/tiny-model "
                      "(2048), var/tiny-mailbox-model (mailbox)")
    demo.add_argument("--seed", type=int, default=0, help="the mailbox and sft runs' seed")
    evaluate = sub.add_parser("evaluate", help="held-out evaluation of a checkpoint against the base model")
    evaluate.add_argument("--config", required=True, help="a run config with an `evaluation` section")
    evaluate.add_argument("--checkpoint", help="a checkpoint directory (default: the base against itself)")
    evaluate.add_argument("--baseline", help="compare with this earlier checkpoint instead of the base model")
    export = sub.add_parser("export-merged", help="merge a checkpoint's adapter into its base model")
    export.add_argument("--base", required=True, help="the base model (directory or hub id)")
    export.add_argument("--adapter", required=True, help="the checkpoint's adapter directory")
    export.add_argument("--out", required=True, help="where the merged model goes")
    plan = sub.add_parser("plan", help="the run's memory plan per GPU and whether it fits (docs/gpu.md)")
    plan.add_argument("--config", required=True, help="a run config (its base model's config.json is read)")
    plan.add_argument("--gpu-gib", type=float, default=None, help="plan for GPUs of this size (GiB) instead of "
                      "this machine's")
    plan.add_argument("--gpu-count", type=int, default=1, help="with --gpu-gib: how many such GPUs (default 1)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            return print_plan(load_run_config(args.config), gpu_gib=args.gpu_gib, gpu_count=args.gpu_count,
                              as_json=args.json)
        if args.command == "export-merged":
            from training.model.export import merge_adapter

            def progress(phase: str, fraction: float) -> None:
                print(json.dumps({"kind": "export_progress", "phase": phase, "progress": fraction}), flush=True)

            merge_adapter(base_model=args.base, adapter_dir=Path(args.adapter), out_dir=Path(args.out),
                          progress=progress)
            return 0
        if args.command == "build-tiny-model":
            from training.fixtures.tiny_model import build_tiny_model

            build_tiny_model(Path(args.dir), seed=args.seed)
            return 0
        if args.command in ("run", "sft"):
            from training.model.preflight import preflight

            config = load_run_config(args.config, kind="sft" if args.command == "sft" else None)
            if problems := preflight(config):  # fail in a second, not after the server started
                raise TrainingError("; ".join(problems))
            return run_config(config)
        if args.command == "evaluate":
            import asyncio

            from training.monitoring.checks import evaluate_checkpoint

            config = load_run_config(args.config)
            asyncio.run(evaluate_checkpoint(config, args.checkpoint, scorer=load_scorer(config),
                                            sink=ConsoleReporter(config.steps), baseline=args.baseline))
            return 0
        if args.task == "sft":
            from training.fixtures.demo_sft import report, sft_demo
            from training.fixtures.tiny_model import ensure_tiny_model

            model_dir = args.model_dir or "var/tiny-model"
            ensure_tiny_model(model_dir)
            summary = sft_demo(out_dir=args.out or "var/demo-sft", model_dir=model_dir, grpo_steps=args.steps or 20,
                               seed=args.seed)
            print(json.dumps(summary))
            print(report(summary), file=sys.stderr)
            return 0
        if args.task == "mailbox":
            from training.fixtures.demo import mailbox_demo_config
            from training.fixtures.tiny_mailbox_model import ensure_tiny_mailbox_model

            model_dir = args.model_dir or "var/tiny-mailbox-model"
            ensure_tiny_mailbox_model(model_dir)
            return run_config(mailbox_demo_config(out_dir=args.out or "var/demo-mailbox", steps=args.steps or 20,
                                                  model_dir=model_dir, seed=args.seed))
        from training.fixtures.demo import demo_config
        from training.fixtures.tiny_model import ensure_tiny_model

        model_dir = args.model_dir or "var/tiny-model"
        ensure_tiny_model(model_dir)
        return run_config(demo_config(out_dir=args.out or "var/demo", steps=args.steps or 30, model_dir=model_dir))
    except TrainingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from training.servers.process_exit import end_process

    end_process(main())  # without the interpreter's finalisation, which could abort a completed run's process
