"""The offline SFT demo (`python -m training demo --task sft`, `make demo-sft`): teach, then reinforce, on the
tiny model and 2048, all on CPU.

1. Distil: a scripted teacher (training/demo_teacher.py, an OpenAI-compatible server that plays by the game's
   rules) plays each of `distil_games` games `answers` times; the game's own reward (the run's scorer; a judge
   would rank them the same way) picks the best game of each, kept at or above `threshold`.
2. Teach: an SFT run on those games (kind sft), whose last step measures the held-out win rate of the SFT
   checkpoint against the base model on the demo's 24 held-out games, with the bootstrap interval.
3. Reinforce: GRPO for `grpo_steps` steps from the SFT checkpoint (the fork path, init_checkpoint) and from the
   base model, the same settings, seed and held-out games; each run's reward per step and its final win rate
   against the base.

Everything it measured is written to OUT/summary.json and printed; docs/sft.md reports a run of it.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from training.config import RunConfig
from training.demo import HELD_OUT, demo_config

DISTIL_SEED_BASE = 5000  # the distilled games' seeds: apart from the demo's training (1000+) and held-out games


def distil_games(*, out: Path, model_dir: str | Path, games: int, answers: int, threshold: float,
                 seed: int) -> dict[str, Any]:
    """Step 1: the teacher's best game per starting position, as conversations in OUT/distilled.jsonl."""
    from openai import AsyncOpenAI

    from training.demo_teacher import Teacher2048
    from training.distill import distil
    from training.environments import RolloutConfig, get_environment, parse_options
    from training.types import Scenario, env_reward_scorer

    base = demo_config(out_dir=out, model_dir=model_dir)
    env = get_environment("game_2048")
    rollout = RolloutConfig(base.system_prompt, base.sampling, parse_options(env, base.environment.options))
    scenarios = [Scenario(id=f"distil-{k}", user_message=base.scenarios[0].user_message,
                          metadata={"seed": DISTIL_SEED_BASE + k}) for k in range(games)]
    async def play(base_url: str) -> list[Any]:
        client = AsyncOpenAI(base_url=base_url, api_key="demo")
        try:
            return await distil(scenarios=scenarios, env=env, client=client, model="teacher-2048", n=answers,
                                rollout_config=rollout, scorer=env_reward_scorer, threshold=threshold, concurrency=8)
        finally:
            await client.close()  # inside the loop: left to the garbage collector it would outlive it

    with Teacher2048(greedy=0.7, seed=seed) as teacher:
        results = asyncio.run(play(teacher.base_url))
    kept = [r for r in results if r.chosen is not None]
    path = out / "distilled.jsonl"
    path.write_text("".join(json.dumps({"messages": r.messages}) + "\n" for r in kept))
    every = [x for r in results for x in r.rewards if x is not None]
    return {"games": games, "answers": answers, "kept": len(kept), "file": str(path),
            "teacher_reward_mean": sum(every) / len(every) if every else None,
            "chosen_reward_mean": sum(r.reward for r in kept) / len(kept) if kept else None}


def _progress(label: str, events: list[Any]) -> Any:
    """A sink that keeps the events and prints one progress line per finished step (stderr)."""
    from training.events import RunStarted, StepFinished

    total = [0]

    def sink(event: Any) -> None:
        events.append(event)
        if isinstance(event, RunStarted):
            total[0] = event.total_steps
        elif isinstance(event, StepFinished):
            m = event.metrics
            value = f"reward {m['reward_mean']:.3f}" if m.get("reward_mean") is not None else \
                f"loss {m['loss']:.3f}" if m.get("loss") is not None else ""
            print(f"{label}: step {event.step}/{total[0]} {value}", file=sys.stderr, flush=True)

    return sink


def _held_out(config: RunConfig) -> list[dict[str, Any]]:
    ids = set(config.evaluation.held_out_ids)
    return [s.model_dump() for s in config.scenarios if s.id in ids]


def teach(*, out: Path, model_dir: str | Path, data: str, epochs: int, seed: int) -> dict[str, Any]:
    """Step 2: SFT on the distilled games; the held-out win rate of its last checkpoint against the base."""
    from training.events import EvaluationFinished, HeldOutLoss
    from training.loop import run

    base = demo_config(out_dir=out, model_dir=model_dir).model_dump(mode="json")
    config = RunConfig.model_validate({
        "kind": "sft", "name": "demo-teach", "base_model": str(model_dir), "output_dir": str(out / "teach"),
        "seed": seed, "system_prompt": base["system_prompt"], "environment": base["environment"],
        "sampling": base["sampling"], "lora": base["lora"], "server": {"kind": "inprocess"}, "device": "cpu",
        "scenarios": _held_out(RunConfig.model_validate(base)),
        "evaluation": {**base["evaluation"], "every": 100000},  # at the last step only
        "sft": {"data_file": data, "epochs": epochs, "batch_tokens": 2048, "micro_batch_tokens": 1024,
                "learning_rate": 2e-3, "warmup_ratio": 0.05, "held_out_fraction": 0.1, "eval_every": 5,
                "save_every": 1000}})
    events: list[Any] = []
    summary = run(config, sink=_progress("teach", events))
    evaluation = [e for e in events if isinstance(e, EvaluationFinished)][-1]
    held = [(e.step, e.loss) for e in events if isinstance(e, HeldOutLoss)]
    return {"steps": summary.steps_done, "checkpoint": str(summary.last_checkpoint.path),
            "held_out_loss": held, "train_loss": [h.get("loss") for h in summary.history],
            "evaluation": evaluation.metrics}


def reinforce(*, out: Path, model_dir: str | Path, steps: int, seed: int, init: str | None,
              name: str) -> dict[str, Any]:
    """Step 3: the GRPO demo run for `steps` steps, from `init` (an adapter) or the base model."""
    from training.events import EvaluationFinished
    from training.loop import run

    config = demo_config(out_dir=out / name, steps=steps, model_dir=model_dir, name=name)
    config = config.model_copy(update={"seed": seed, "init_checkpoint": init, "device": "cpu",
                                       "evaluation": config.evaluation.model_copy(update={"every": steps})})
    events: list[Any] = []
    summary = run(config, sink=_progress(name, events))
    evaluation = [e for e in events if isinstance(e, EvaluationFinished)][-1]
    return {"from": "sft checkpoint" if init else "base model", "steps": summary.steps_done,
            "reward_mean": [h.get("reward_mean") for h in summary.history],
            "env_mean": [h.get("env_mean") for h in summary.history], "evaluation": evaluation.metrics}


def sft_demo(*, out_dir: str | Path, model_dir: str | Path, grpo_steps: int = 20, seed: int = 0,
             games: int = 96, answers: int = 4, threshold: float = 0.5, epochs: int = 3) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    def step(label: str, fn: Any, **kwargs: Any) -> Any:
        print(f"== {label}", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = fn(**kwargs)
        timings[label] = round(time.monotonic() - started, 1)
        return result

    distilled = step("distil", distil_games, out=out, model_dir=model_dir, games=games, answers=answers,
                     threshold=threshold, seed=seed)
    taught = step("teach", teach, out=out, model_dir=model_dir, data=distilled["file"], epochs=epochs, seed=seed)
    from_sft = step("reinforce from the sft checkpoint", reinforce, out=out, model_dir=model_dir, steps=grpo_steps,
                    seed=seed, init=taught["checkpoint"], name="grpo-from-sft")
    from_base = step("reinforce from the base model", reinforce, out=out, model_dir=model_dir, steps=grpo_steps,
                     seed=seed, init=None, name="grpo-from-base")
    summary = {"seed": seed, "held_out_games": HELD_OUT, "distil": distilled, "teach": taught,
               "grpo_from_sft": from_sft, "grpo_from_base": from_base, "seconds": timings}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def report(summary: dict[str, Any]) -> str:
    """The summary in a few lines (stderr)."""
    def win(m: dict[str, Any]) -> str:
        return (f"{m['eval_win_rate']:.3f} [{m['eval_ci_low']:.3f}, {m['eval_ci_high']:.3f}] "
                f"(env reward {m['eval_env_checkpoint']:.3f} vs base {m['eval_env_base']:.3f})")

    d, t = summary["distil"], summary["teach"]
    lines = [f"distilled {d['kept']} of {d['games']} games (best of {d['answers']}; teacher mean reward "
             f"{d['teacher_reward_mean']:.3f}, chosen {d['chosen_reward_mean']:.3f})",
             f"SFT: {t['steps']} steps; held-out loss {t['held_out_loss'][0][1]:.3f} -> {t['held_out_loss'][-1][1]:.3f}; "
             f"win rate vs base {win(t['evaluation'])}"]
    for key in ("grpo_from_sft", "grpo_from_base"):
        g = summary[key]
        first = next((r for r in g["reward_mean"] if r is not None), float("nan"))
        lines.append(f"GRPO from the {g['from']}: {g['steps']} steps; reward {first:.3f} -> {g['reward_mean'][-1]:.3f}; "
                     f"win rate vs base {win(g['evaluation'])}")
    return "\n".join(lines)
