"""Pipelined steps against sequential ones on the demo workload, with a judge that answers after a fixed latency.

    python -m bench.pipeline_bench                      (timing: about 10 minutes on 2 shared cores)
    python -m bench.pipeline_bench --curve              (adds the 30-step learning curves: 3 seeds x 2 modes)
    python -m bench.pipeline_bench --timing-steps 0 --curve     (the learning curves alone)

1. Timing. For each judge latency (0.5, 1.5, 3 s), the demo's workload (tiny model, 2048, 4 groups of 8 on the
   local server; held-out evaluation off) runs sequential and pipelined, alternating which goes first, each
   for `--timing-steps` steps, scored by the real judge scorer (litellm over HTTP) against the judge double
   (`python -m tests.judge_double --latency S`, its own process; judge cache off, so every group waits; the
   reward is the game's, `combine: env`). Per step, from the step metrics: rollout-and-judge = `time_rollout_s`
   (until the step's last group is scored), train-save-load = `time_train_s + time_load_s`, and the step's
   wall time `time_step_s` (from the previous step's end). Step 1 of each run is left out (warm-up, and a
   pipelined run's first step has nothing to overlap with). Printed: the medians, pipelined / sequential step
   time, and the pipelined step time over the slower stage's median (target <= 1.15; sequential is their sum),
   with the stages measured in the sequential run (uncontended) and in the pipelined run itself.
2. Learning curves (`--curve`). The demo's 30 steps on the game's reward (no judge: the staleness does not
   depend on the judge's latency), sequential and pipelined, for seeds 0, 1, 2, alternating. Printed: the mean
   reward of steps 25-30 per run, the mean and spread over seeds, and the pipelined - sequential difference
   against its noise (2 standard errors of the difference, from the seeds' spread). Also the staleness and the
   importance weights (p_trainer / p_sampler per sampled token, the weight the loss applied, the share the
   cap truncated), medians over the pipelined steps.
Progress goes to stderr, the tables to stdout, everything to bench/results/pipeline_bench.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _key, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                     "HF_HUB_DISABLE_PROGRESS_BARS": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
    os.environ.setdefault(_key, _value)  # nothing reaches for the network

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "var" / "tiny-model"  # the demo's copy: built once, reused
RESULTS = ROOT / "bench" / "results" / "pipeline_bench.json"
MODES = ("sequential", "pipelined")
IMPORTANCE = ("is_ratio_mean", "is_weight_mean", "is_truncated_fraction")


def progress(message: str) -> None:
    print(f"[pipeline_bench] {message}", file=sys.stderr, flush=True)


def bench_config(mode: str, *, steps: int, seed: int, out: Path, judge: dict[str, Any] | None) -> Any:
    from training.fixtures.demo import demo_config

    data = demo_config(out_dir=out, steps=steps, model_dir=MODEL_DIR, name=f"{mode}-{seed}").model_dump()
    data.update(seed=seed, evaluation={}, pipeline={"enabled": mode == "pipelined"}, judge=judge)
    from training.config import RunConfig

    return RunConfig.model_validate(data)


def run_once(mode: str, *, steps: int, seed: int = 0, judge: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    from training import run

    scorer = None
    if judge is not None:
        from studio.scoring import judge_scorer_from_config

        scorer = judge_scorer_from_config(judge, api_key="bench")
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as out:
        started = time.monotonic()
        summary = run(bench_config(mode, steps=steps, seed=seed, out=Path(out), judge=judge), scorer=scorer)
        progress(f"  {mode} seed {seed}: {steps} steps in {time.monotonic() - started:.0f} s")
    rewards = [h["reward_mean"] for h in summary.history]
    progress(f"  rewards {json.dumps([round(r, 3) for r in rewards])}; staleness "
             f"{sorted({h['staleness'] for h in summary.history})}; is_weight_mean median "
             f"{fmt(median([h['is_weight_mean'] for h in summary.history]), '.4f')}")
    return summary.history


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def stage_medians(history: list[dict[str, Any]]) -> dict[str, Any]:
    steady = history[1:]  # step 1: warm-up, and nothing to overlap with
    return {"rollout_judge_s": median([h["time_rollout_s"] for h in steady]),
            "train_save_load_s": median([h["time_train_s"] + h["time_load_s"] for h in steady]),
            "step_s": median([h["time_step_s"] for h in steady]),
            "staleness": median([h["staleness"] for h in steady]),
            **{k: median([h[k] for h in steady]) for k in IMPORTANCE}, "steps": len(steady)}


def bench_timing(latencies: list[float], steps: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for k, latency in enumerate(latencies):
        proc = subprocess.Popen([sys.executable, "-m", "tests.judge_double", "--latency", str(latency)],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            api_base = proc.stdout.readline().strip()  # type: ignore[union-attr]
            judge = {"judge_model": "openai/judge", "api_base": api_base, "cache": False, "combine": "env",
                     "concurrency": 4}
            progress(f"judge latency {latency} s: {steps} steps per mode")
            histories: dict[str, list[dict[str, Any]]] = {}
            order = MODES if k % 2 == 0 else MODES[::-1]  # alternate which mode runs first
            for mode in order:
                histories[mode] = run_once(mode, steps=steps, judge=judge)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        seq, pipe = (stage_medians(histories[m]) for m in MODES)
        slower_seq = max(seq["rollout_judge_s"], seq["train_save_load_s"])
        slower_pipe = max(pipe["rollout_judge_s"], pipe["train_save_load_s"])
        results[str(latency)] = {
            "order": list(order), "sequential": seq, "pipelined": pipe,
            "pipelined_over_sequential": pipe["step_s"] / seq["step_s"],
            "pipelined_over_slower_stage_seq": pipe["step_s"] / slower_seq,
            "pipelined_over_slower_stage_pipe": pipe["step_s"] / slower_pipe,
            "sequential_over_stage_sum": seq["step_s"] / (seq["rollout_judge_s"] + seq["train_save_load_s"]),
            "steps": {m: [{k: h.get(k) for k in ("step", "time_rollout_s", "time_train_s", "time_load_s",
                                                 "time_step_s", "staleness", *IMPORTANCE)} for h in histories[m]]
                      for m in MODES}}
    return results


def bench_curves(seeds: list[int], steps: int) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in MODES}
    for k, seed in enumerate(seeds):
        for mode in MODES if k % 2 == 0 else MODES[::-1]:
            progress(f"learning curve: {mode}, seed {seed}, {steps} steps")
            runs[mode][str(seed)] = run_once(mode, steps=steps, seed=seed)
    last = {m: [statistics.fmean(h["reward_mean"] for h in hist[-6:]) for hist in runs[m].values()] for m in MODES}
    first = {m: [statistics.fmean(h["reward_mean"] for h in hist[:5]) for hist in runs[m].values()] for m in MODES}
    spread = {m: statistics.stdev(v) if len(v) > 1 else 0.0 for m, v in last.items()}
    noise = 2 * math.sqrt(sum(s ** 2 / len(last[m]) for m, s in spread.items()))
    difference = statistics.fmean(last["pipelined"]) - statistics.fmean(last["sequential"])
    pipelined_steps = [h for hist in runs["pipelined"].values() for h in hist]
    return {
        "seeds": seeds, "steps": steps, "last_steps": f"{steps - 5}-{steps}",
        "reward_last": last, "reward_first5": first, "spread_over_seeds": spread,
        "difference": difference, "noise_2se": noise, "within_noise": abs(difference) <= noise,
        "staleness": {m: sorted({h["staleness"] for hist in runs[m].values() for h in hist}) for m in MODES},
        "importance_pipelined": {k: {"median": median([h[k] for h in pipelined_steps]),
                                     "min": min((h[k] for h in pipelined_steps if h[k] is not None), default=None),
                                     "max": max((h[k] for h in pipelined_steps if h[k] is not None), default=None)}
                                 for k in IMPORTANCE},
        "curves": {m: {seed: [h["reward_mean"] for h in hist] for seed, hist in runs[m].items()} for m in MODES},
    }


def fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def timing_table(results: dict[str, Any]) -> str:
    lines = ["Step time, medians over steps 2..N (s); stages: rollout-and-judge | train-save-load",
             f"{'latency':>8} {'mode':>11} {'roll+judge':>10} {'train+save':>10} {'step':>7} {'stale':>6} "
             f"{'IS ratio':>9} {'IS weight':>9} {'trunc':>6}"]
    for latency, r in results.items():
        for mode in MODES:
            m = r[mode]
            lines.append(f"{latency:>7}s {mode:>11} {fmt(m['rollout_judge_s']):>10} {fmt(m['train_save_load_s']):>10} "
                         f"{fmt(m['step_s']):>7} {fmt(m['staleness'], '.0f'):>6} {fmt(m['is_ratio_mean'], '.3f'):>9} "
                         f"{fmt(m['is_weight_mean'], '.3f'):>9} {fmt(m['is_truncated_fraction'], '.3f'):>6}")
    lines += ["", f"{'latency':>8} {'pipelined/sequential':>21} {'pipelined/slower stage (seq stages)':>36} "
                  f"{'(pipelined stages)':>19} {'sequential/stage sum':>21}"]
    for latency, r in results.items():
        lines.append(f"{latency:>7}s {r['pipelined_over_sequential']:>20.2f}x "
                     f"{r['pipelined_over_slower_stage_seq']:>35.2f}x {r['pipelined_over_slower_stage_pipe']:>18.2f}x "
                     f"{r['sequential_over_stage_sum']:>20.2f}x")
    return "\n".join(lines)


def curve_table(c: dict[str, Any]) -> str:
    lines = [f"Learning curve: mean reward of steps {c['last_steps']} (and of steps 1-5), seeds {c['seeds']}"]
    for mode in MODES:
        last = ", ".join(f"{v:.3f}" for v in c["reward_last"][mode])
        first = ", ".join(f"{v:.3f}" for v in c["reward_first5"][mode])
        lines.append(f"  {mode:>11}: {last}   mean {statistics.fmean(c['reward_last'][mode]):.3f} "
                     f"± {c['spread_over_seeds'][mode]:.3f} (sd over seeds)   steps 1-5: {first}")
    lines.append(f"  pipelined - sequential: {c['difference']:+.3f}; noise (2 SE of the difference): "
                 f"{c['noise_2se']:.3f}; within noise: {c['within_noise']}")
    lines.append(f"  staleness seen: {c['staleness']}")
    for k, v in c["importance_pipelined"].items():
        lines.append(f"  pipelined {k}: median {fmt(v['median'], '.3f')}, range {fmt(v['min'], '.3f')}.."
                     f"{fmt(v['max'], '.3f')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from training.fixtures.tiny_model import ensure_tiny_model

    p = argparse.ArgumentParser(prog="python -m bench.pipeline_bench")
    p.add_argument("--latencies", type=float, nargs="+", default=[0.5, 1.5, 3.0])
    p.add_argument("--timing-steps", type=int, default=6, help="steps per timed run (0: no timing part)")
    p.add_argument("--curve", action="store_true", help="also run the learning curves (long)")
    p.add_argument("--curve-steps", type=int, default=30)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args(argv)
    ensure_tiny_model(MODEL_DIR)
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                           "python": platform.python_version()},
                               "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args)}
    if args.timing_steps:
        results["timing"] = bench_timing(args.latencies, args.timing_steps)
        print(timing_table(results["timing"]), flush=True)
    if args.curve:
        results["curve"] = bench_curves(args.seeds, args.curve_steps)
        print(curve_table(results["curve"]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    name = RESULTS if args.timing_steps and args.curve else RESULTS.with_stem(
        "pipeline_bench_timing" if args.timing_steps else "pipeline_bench_curve")
    name.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {name.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
