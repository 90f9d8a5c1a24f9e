"""A stand-in engine for tests of the web app's execution paths: the real event contract (training.events),
the real control protocol, a checkpoint directory per step, no model. `python manage.py` never uses it; tests
select it with STUDIO_ENGINE=tests.webapp.scripted_engine:train. Runs that need learning use the real engine.

config.environment.options may hold {"phase_s": seconds per phase} to give a test time to pause or kill, and
{"alert_at_step": k} to send a monitor alert that asks for a pause after step k, and {"review": true} to ask
for each step's review (the real loop's handshake: the parent's effective rewards replace the step's rewards;
an engine stopped while it waits keeps the step, and the next one takes it up without new groups), and
{"judged": true} to score each group with the run's real judge scorer (a judge that is down keeps the step and
stops with `judge_unavailable`, as the real loop does; the next engine judges only those groups).
Fault tests find where it is: it writes its pid to `engine.pid` and "<step>:<moment>" to `moment` in the output
directory as it enters each moment of a step (rollouts, judging, optimizer, checkpoint), and waits phase_s
there. Each scored group reports one judge call (cost 0.001 $), as the judge scorer does, so accounting can be
checked across faults. Checkpoints are written under a staging name and renamed, like training/model/checkpoints.py.
"""
from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from training.config import RunConfig
from training.rl.parking import scored_step_discard, scored_step_keep, scored_step_take
from types import SimpleNamespace

from training.events import (CheckpointSaved, GroupRolledOut, GroupScored, JudgeUnavailable, MonitorAlert,
                             ReviewApplied, ReviewRequested, RunFinished, RunHeld, RunStarted, StepFinished, TrainStep)
from training.rl.groups import score_group
from training.types import Scenario, Trajectory, TrajectoryGroup


async def _go(control, delay: float, on_pause=None) -> bool:
    await asyncio.sleep(delay)
    if control.state() == "pause" and on_pause is not None:  # held: said, as the real loop says it (wait_for_go)
        on_pause()
    while control.state() == "pause":
        await asyncio.sleep(0.05)
    return control.state() != "cancel"


def _at(out: Path, step: int, moment: str) -> None:
    (out / "moment.tmp").write_text(f"{step}:{moment}")
    (out / "moment.tmp").replace(out / "moment")


def _group(config: RunConfig, scenario, rewards: list[float], step: int) -> TrajectoryGroup:
    return TrajectoryGroup(scenario=Scenario(id=scenario.id, user_message=scenario.user_message), trajectories=[
        Trajectory(scenario_id=scenario.id, env_reward=r, messages=[
            {"role": "system", "content": config.system_prompt}, {"role": "user", "content": scenario.user_message},
            {"role": "assistant", "content": f"attempt {i}"}]) for i, r in enumerate(rewards)])


async def train(config: RunConfig, *, scorer=None, sink, control, review=None):
    delay = float(config.environment.options.get("phase_s", 0.0))
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "engine.pid").write_text(str(os.getpid()))
    done = sorted(int(p.name) for p in out.glob("[0-9]*") if p.is_dir())
    start = (done[-1] + 1) if done else 1
    # A step parked at its review, or for its judge, goes on without rolling out again, as the real loop's does
    # (training/parking); groups the judge was down for are judged now.
    kept_groups = scored_step_take(out, step=start, model_step=start - 1)
    kept = start if kept_groups is not None else 0
    judged = bool(config.environment.options.get("judged")) and scorer is not None
    sink(RunStarted(run_name=config.name, start_step=start, total_steps=config.steps, resumed=bool(done),
                    checkpoint_path=str(out / f"{done[-1]:04d}") if done else "",
                    adapter_name=f"{config.name}@{done[-1]}" if done else "", scored_step=kept))
    step = start
    reviewing = bool(config.environment.options.get("review")) and review is not None
    for step in range(start, config.steps + 1):
        scored: list[list[float]] = []
        judged_groups: list = []  # with `judged`, the step's groups as the judge scored them (or could not)
        _at(out, step, "rollouts")
        if step != kept and not await _go(control, delay, lambda: sink(RunHeld(step=step - 1, trained=True))):
            sink(RunFinished(status="cancelled", steps_done=step - 1))
            return
        for g in range(config.grpo.groups_per_step):
            scenario = config.scenarios[(step + g) % len(config.scenarios)]
            rewards = [round((i + step) / (config.grpo.group_size + step), 3) for i in range(config.grpo.group_size)]
            old = kept_groups[g] if step == kept and kept_groups else None
            if step == kept and not (old is not None and old.judge_outage):  # recorded before the park
                scored.append([t.reward for t in old.trajectories] if old is not None else rewards)
                judged_groups.append(old)
                continue
            if judged:  # the real judge scorer (its HTTP calls included) on the step's answers
                group = old or _group(config, scenario, rewards, step)
                group.judge_outage = group.scoring_error = None
                await score_group(group, scorer, config.grpo)
                judged_groups.append(group)
                rewards = [t.reward for t in group.trajectories]
                if group.judge_outage:
                    continue
            scored.append(rewards)
            if old is None:  # one rolled out before the park has new scores only
                sink(GroupRolledOut(step=step, group_index=g, scenario_id=scenario.id, model=config.name,
                                    trajectories=len(rewards), errors=[]))
            if g == config.grpo.groups_per_step - 1:  # the step's earlier groups are scored by now
                _at(out, step, "judging")
                await asyncio.sleep(delay)
            mean = sum(rewards) / len(rewards)
            trajectories = [{
                "scenario_id": scenario.id, "tools": None, "turn_token_ids": [], "env_reward": r,
                "judge_score": r if judged else None, "explanation": f"answer {i} of step {step}", "criteria": {},
                "reward": r,
                "advantage": r - mean, "error": None, "completion_tokens": 5,
                "metadata": {"judge_calls": [{"prompt_hash": f"{step}-{g}", "prompt_tokens": 100,
                                              "completion_tokens": 20, "cost_usd": 0.001}]} if i == 0 else {},
                "messages": [{"role": "system", "content": config.system_prompt},
                             {"role": "user", "content": scenario.user_message},
                             {"role": "assistant", "content": f"attempt {i}"}],
            } for i, r in enumerate(rewards)]
            sink(GroupScored(step=step, group_index=g, scenario_id=scenario.id, trajectories=trajectories,
                             reward_mean=mean, reward_std=0.1, skipped=False))
        if outages := [grp.judge_outage for grp in judged_groups if grp is not None and grp.judge_outage]:
            scored_step_keep(out, step=step, model_step=step - 1, groups=judged_groups)
            sink(JudgeUnavailable(step=step, detail=outages[0], groups=len(outages)))
            sink(RunFinished(status="cancelled", steps_done=step - 1))
            return
        if reviewing:  # as the real loop: the step trains on the rewards the parent sends back
            sink(ReviewRequested(step=step))
            groups = [SimpleNamespace(trajectories=[SimpleNamespace(reward=r) for r in rs]) for rs in scored]
            await review(step, groups)
            if control.state() == "cancel":  # parked at its review: the next engine takes the step up
                scored_step_keep(out, step=step, model_step=step - 1, groups=[])
                sink(RunFinished(status="cancelled", steps_done=step - 1))
                return
            applied = []
            for g, group in enumerate(groups):
                rewards = [t.reward for t in group.trajectories]
                mean = sum(rewards) / len(rewards)
                applied.append({"group_index": g, "rewards": rewards, "advantages": [r - mean for r in rewards],
                                "skipped": False})
            sink(ReviewApplied(step=step, groups=applied))
        _at(out, step, "optimizer")
        if not await _go(control, delay, lambda: sink(RunHeld(step=step, trained=False))):
            sink(RunFinished(status="cancelled", steps_done=step - 1))
            return
        sink(TrainStep(step=step, metrics={"loss": 0.5 / step, "kl": 0.0, "clip_fraction": 0.0, "grad_norm": 1.0}))
        path, staging = out / f"{step:04d}", out / f".staging-{step:04d}"
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "adapter_config.json").write_text(json.dumps({"r": 8}))
        _at(out, step, "checkpoint")
        await asyncio.sleep(delay)
        staging.rename(path)
        scored_step_discard(out)
        sink(CheckpointSaved(step=step, path=str(path), adapter_name=f"{config.name}@{step}"))
        sink(StepFinished(step=step, metrics={"reward_mean": 0.3 + 0.1 * step, "reward_std": 0.1, "env_mean": 0.3,
                                              "loss": 0.5 / step, "kl": 0.0, "skipped_groups": 0}))
        if step == config.environment.options.get("alert_at_step"):
            sink(MonitorAlert(step=step, monitor="length", value=3.5, threshold=2.0, pause=True,
                              message="answer length grew 3.5x since the first 3 steps (threshold 2.0x)"))
    sink(RunFinished(status="completed", steps_done=config.steps))
