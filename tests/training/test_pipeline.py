"""Pipelined steps (`pipeline.enabled`): the next step's rollouts run while a step trains, one step stale, and
the review gate, pause, cancel and resume keep every step exactly once."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from training import run
from training.environments import register
from training.environments.game_2048 import Game2048Environment
from training.events import GroupRolledOut, GroupScored, RunStarted, StaticControl, StepFinished, TrainStep
from training.types import Score

from tests.training.configs import small_config

ROLLOUTS_PER_STEP = 8  # small_config: 2 groups of 4


class Recorder(list):
    """Every event with the time it arrived."""

    def __call__(self, event):
        self.append((time.monotonic(), event))

    def of(self, kind, step=None):
        return [e for _, e in self if isinstance(e, kind) and (step is None or e.step == step)]

    def time_of(self, kind, step):
        return next(t for t, e in self if isinstance(e, kind) and e.step == step)


@register("clocked_2048")
class Clocked2048(Game2048Environment):
    """Records when each rollout starts, before anything else can run."""

    starts: list[float] = []

    async def rollout(self, client, model, scenario, config):
        self.starts.append(time.monotonic())
        return await super().rollout(client, model, scenario, config)


async def by_position(group):
    await asyncio.sleep(0.2)  # a judge that takes a while: the next step's scoring overlaps this step's training
    return [Score(reward=i / len(group.trajectories)) for i in range(len(group.trajectories))]


def test_the_next_steps_rollouts_start_before_this_step_trains_and_are_one_step_stale(tiny_model_dir, tmp_path):
    Clocked2048.starts = []
    events = Recorder()
    config = small_config(tiny_model_dir, tmp_path, steps=3, environment={"kind": "clocked_2048"},
                          pipeline={"enabled": True})
    summary = run(config, scorer=by_position, sink=events)
    assert summary.status == "completed" and summary.steps_done == 3
    # Step 2's rollouts all started while step 1 was still training (its TrainStep came after), and without a
    # review hook as soon as step 1's were done: before its last group was scored (the judge takes 0.2 s).
    trained = events.time_of(TrainStep, 1)
    assert sum(s < trained for s in Clocked2048.starts) == 2 * ROLLOUTS_PER_STEP
    last_scored = max(t for t, e in events if isinstance(e, GroupScored) and e.step == 1)
    assert min(Clocked2048.starts[ROLLOUTS_PER_STEP:]) < last_scored
    assert max(Clocked2048.starts[:ROLLOUTS_PER_STEP]) < min(Clocked2048.starts[ROLLOUTS_PER_STEP:])
    # Step k+1 samples with the adapter step k trains on top of: base, base, then t@1 (never older).
    assert [e.model for e in events.of(GroupRolledOut)] == ["base"] * 4 + ["t@1"] * 2
    steps = [e.metrics for e in events.of(StepFinished)]
    assert [m["rollout_model"] for m in steps] == ["base", "base", "t@1"]
    assert [m["staleness"] for m in steps] == [0, 1, 1]
    # Every group is reported once, for its own step, and the correction is on (tis_cap 2 by default).
    assert sorted((e.step, e.group_index) for e in events.of(GroupScored)) == [(s, i) for s in (1, 2, 3)
                                                                               for i in (0, 1)]
    for m in steps:
        assert m["is_weight_mean"] is not None and 0.0 <= m["is_truncated_fraction"] <= 1.0


def test_sequential_steps_stay_on_policy(tiny_model_dir, tmp_path):
    Clocked2048.starts = []
    events = Recorder()
    run(small_config(tiny_model_dir, tmp_path, steps=2, environment={"kind": "clocked_2048"},
                     pipeline={"enabled": False}), scorer=by_position, sink=events)
    trained = events.time_of(TrainStep, 1)
    assert sum(s < trained for s in Clocked2048.starts) == ROLLOUTS_PER_STEP
    steps = [e.metrics for e in events.of(StepFinished)]
    assert [m["staleness"] for m in steps] == [0, 0] and [m["rollout_model"] for m in steps] == ["base", "t@1"]
    assert steps[0]["is_truncated_fraction"] is None  # no correction asked for


def test_by_default_a_judged_run_is_pipelined_and_one_on_the_environments_reward_is_not(tiny_model_dir, tmp_path):
    judged, unjudged = Recorder(), Recorder()
    run(small_config(tiny_model_dir, tmp_path / "judged"), scorer=by_position, sink=judged)
    run(small_config(tiny_model_dir, tmp_path / "env"), sink=unjudged)
    assert [e.metrics["staleness"] for e in judged.of(StepFinished)] == [0, 1]
    assert [e.metrics["staleness"] for e in unjudged.of(StepFinished)] == [0, 0]


def _local_server_threads() -> list[int]:
    """The --threads of the local servers this process started, read from their command lines."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            args = (stat.parent / "cmdline").read_bytes().decode().split("\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and "training.servers.local" in args:
            found.append(int(args[args.index("--threads") + 1]))
    return found


def test_a_pipelined_run_gives_its_local_server_and_its_trainer_half_the_cores_each(tiny_model_dir, tmp_path):
    import torch

    cores = torch.get_num_threads()
    seen = []

    def sink(event):
        if isinstance(event, StepFinished):
            seen.append((_local_server_threads(), torch.get_num_threads()))

    local = {"kind": "local"}  # this test is about the local server's process
    run(small_config(tiny_model_dir, tmp_path / "piped", pipeline={"enabled": True}, server=local), scorer=by_position,
        sink=sink)
    assert seen == [([max(1, cores // 2)], max(1, cores - cores // 2))] * 2
    assert torch.get_num_threads() == cores  # given back when the run ends
    seen.clear()
    run(small_config(tiny_model_dir, tmp_path / "seq", pipeline={"enabled": False}, server=local), scorer=by_position,
        sink=sink)
    assert seen == [([0], cores)] * 2  # sequential: the two take turns, each with every core (0: torch's default)


def test_with_a_review_the_next_steps_rollouts_wait_for_it(tiny_model_dir, tmp_path):
    Clocked2048.starts = []
    events = Recorder()
    approved = {}

    async def review(step, groups):
        await asyncio.sleep(0.5)  # a person takes a while; the next step must not roll out on the old rewards' step
        approved[step] = time.monotonic()

    config = small_config(tiny_model_dir, tmp_path, steps=2, environment={"kind": "clocked_2048"},
                          pipeline={"enabled": True})
    run(config, scorer=by_position, sink=events, review=review)
    second = Clocked2048.starts[ROLLOUTS_PER_STEP:]
    assert len(second) == ROLLOUTS_PER_STEP
    assert min(second) > approved[1]  # after step 1 was approved, not as soon as its rollouts were done
    assert min(second) < events.time_of(TrainStep, 1)  # and still while step 1 trained


def test_a_pause_keeps_the_rollouts_ahead_for_the_next_step(tiny_model_dir, tmp_path):
    control = StaticControl()
    events = Recorder()
    resumed = {}

    def sink(event):
        events(event)
        if isinstance(event, StepFinished) and event.step == 1:
            control.set("pause")
            threading.Timer(1.5, lambda: (resumed.setdefault("at", time.monotonic()), control.set("run"))).start()

    config = small_config(tiny_model_dir, tmp_path, steps=2, pipeline={"enabled": True})
    summary = run(config, scorer=by_position, sink=sink, control=control)
    assert summary.status == "completed" and summary.steps_done == 2
    # Step 2's groups were rolled out before the pause ended, once, and step 2 trained on them.
    assert len(events.of(GroupScored, step=2)) == 2
    assert all(t < resumed["at"] for t, e in events if isinstance(e, GroupRolledOut) and e.step == 2)
    assert events.of(StepFinished, step=2)[0].metrics["staleness"] == 1


def test_a_cancel_discards_the_rollouts_ahead_and_a_resume_redoes_that_step(tiny_model_dir, tmp_path):
    control = StaticControl()
    first = Recorder()

    def sink(event):
        first(event)
        if isinstance(event, StepFinished):
            control.set("cancel")

    config = small_config(tiny_model_dir, tmp_path, steps=3, pipeline={"enabled": True})
    summary = run(config, scorer=by_position, sink=sink, control=control)
    assert summary.status == "cancelled" and summary.steps_done == 1
    assert not (tmp_path / "checkpoints" / "step_0002").exists()  # the rollouts ahead never trained

    second = Recorder()
    summary = run(config, scorer=by_position, sink=second)
    assert summary.status == "completed"
    started = second.of(RunStarted)[0]
    assert started.resumed and started.start_step == 2  # step 2 is redone, not lost and not doubled
    assert [e.step for e in second.of(StepFinished)] == [2, 3]
    assert sorted((e.step, e.group_index) for e in second.of(GroupScored)) == [(2, 0), (2, 1), (3, 0), (3, 1)]
    # The redone step 2 samples with step 1's adapter, on-policy: the interrupted run's stale rollouts are gone.
    assert second.of(StepFinished, step=2)[0].metrics["rollout_model"] == "t@1"
    assert second.of(StepFinished, step=2)[0].metrics["staleness"] == 0


def test_judge_calls_keep_to_the_judges_concurrency_limit_across_groups_and_steps(tiny_model_dir, tmp_path):
    from studio.scoring import judge_scorer_from_config
    from tests.judge_double import JudgeDouble, marker_or_brevity

    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity), latency_s=0.3) as double:
        options = {"judge_model": "openai/judge", "api_base": double.api_base, "cache": False, "combine": "env",
                   "concurrency": 2}
        config = small_config(tiny_model_dir, tmp_path, steps=3, grpo={"groups_per_step": 4},
                              pipeline={"enabled": True})
        summary = run(config, scorer=judge_scorer_from_config(options, api_key="test"))
    assert summary.status == "completed"
    assert len(double.requests) >= 6  # most of the 12 groups were sent (a group of identical games is not)
    assert double.max_in_flight == 2  # the 4 groups of a step (rolled out ahead or not) share the limit of 2
