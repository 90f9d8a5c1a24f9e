"""The training loop, top to bottom: for each step, roll out every group concurrently, score each group as soon
as it finishes (scoring overlaps the remaining rollouts), optionally wait for human review, compute GRPO
advantages, train the LoRA adapter, save a checkpoint, hot-load it into the inference server under a new
versioned name, report metrics. Resumes from the last checkpoint in `output_dir`. With `pipeline.enabled` the
next step's rollouts run while a step trains (training/rl/pipeline.py), one step stale. What happens to one group
(rolled out, scored, advantages, its event) is in training/rl/groups.py.

`train_grpo` is the GRPO kind behind the engine's one entry: library use is `await training.train(config,
scorer=..., sink=..., control=..., review=...)` or `training.run(config, ...)`, which hand SFT runs (`kind: "sft"`)
to training/sft/loop.py instead. The CLI is `python -m training run --config FILE.json`.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.config import RunConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.environments.scenarios import load_scenarios
from training.events import (CheckpointSaved, Control, EventSink, GroupRolledOut, JudgeUnavailable, JudgeUsage,
                             MemoryPlanned, ReviewApplied, ReviewRequested, RunFailed, RunFinished, RunHeld, RunStarted,
                             StaticControl, StepFinished, TrainStep, null_sink, wait_for_go)
from training.model.checkpoints import (Checkpoint, RunSummary, adapter_name, checkpoint_dir, commit_checkpoint,
                                        latest_checkpoint, latest_optimizer_state, refuse_mismatched_parent, save_state)
from training.model.gpu.sharing import GpuReader, check_trainer_fits, gpu_index, read_gpus, resolve_sharing
from training.monitoring.checks import RunChecks, split_for_run
from training.rl.groups import apply_scores, covered_seconds, group_event, rollout_groups, score_group, step_metrics
from training.rl.parking import scored_step_discard, scored_step_keep, scored_step_rescore, scored_step_take
from training.rl.pipeline import Ahead, StepRollouts, is_pipelined, set_threads, split_cores
from training.types import ReviewHook, Scenario, Scorer, TrainingError, TrajectoryGroup, env_reward_scorer

if TYPE_CHECKING:
    from training.rl.external import Inbox


def scenarios_for_step(scenarios: list[Scenario], step: int, per_step: int, seed: int) -> list[Scenario]:
    """Walks a seeded shuffle of the scenarios, epoch after epoch: the same steps get the same scenarios on resume."""
    chosen = []
    for i in range((step - 1) * per_step, step * per_step):
        epoch, k = divmod(i, len(scenarios))
        order = list(range(len(scenarios)))
        random.Random(seed * 100003 + epoch).shuffle(order)
        chosen.append(scenarios[order[k]])
    return chosen


async def follow_rank0(trainer: Any, on_trainer: Any, start: int) -> RunSummary:
    """A rank above 0 under torchrun: rank 0 rolls out, scores, checkpoints and serves; this process trains on
    each step's groups as rank 0 sends them (the trainer's collectives need every rank), until a status arrives."""
    from training.model.gpu import distributed

    steps = 0
    while not isinstance(message := await on_trainer(distributed.receive_from_rank0), str):
        if message == distributed.SNAPSHOT:
            await on_trainer(trainer.optimizer_snapshot)  # rank 0 writes it; FSDP needs every rank to gather it
            continue
        await on_trainer(trainer.train_step, message)
        steps += 1
    return RunSummary(status=message, steps_done=start - 1 + steps, last_checkpoint=None, history=[])


async def train_grpo(config: RunConfig, *, scorer: Scorer | None = None, sink: EventSink = null_sink,
                     control: Control | None = None, review: ReviewHook | None = None, inbox: Inbox | None = None,
                     gpu_reader: GpuReader = read_gpus) -> RunSummary:
    """Trains a GRPO run. Reached through `training.train`, which checks the rank, adds the run's experiment
    trackers to `sink` and hands each run kind to its loop. An `external` agent's groups arrive in `inbox`
    (training/rl/external.py). `gpu_reader` says what memory the worker's GPUs have (and have free): the memory
    plan's input."""
    from training.model.adapter import pick_device, release_cached_memory
    from training.model.gpu import distributed
    from training.rl.trainer import Trainer
    from training.servers import close_client, start_server

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    judged, scorer = scorer is not None, scorer or env_reward_scorer
    control = control or StaticControl()
    scenarios = load_scenarios(config)
    env = get_environment(config.environment.kind)
    rollout_config = RolloutConfig(config.system_prompt, config.sampling,
                                   parse_options(env, config.environment.options))
    await env.launch(rollout_config.options)  # e.g. an MCP server that does not start refuses the run here
    roles = env.roles(rollout_config.options)  # one group per (scenario, role) each step
    scenarios, held_out = split_for_run(config, scenarios)  # held-out scenarios are never trained on
    external_agent = config.environment.kind == "external"
    if external_agent and inbox is None:
        raise TrainingError("an external agent's groups are submitted through Rubric Studio's web app (or pass "
                            "an `inbox` to training.train)")
    # The evaluation rolls out with the environment; an external agent's code is not here to do it.
    checks = RunChecks(config=config, held_out=[] if external_agent else held_out, env=env,
                       rollout_config=rollout_config, scorer=scorer, sink=sink)
    checkpoint = latest_checkpoint(out)
    start = checkpoint.step + 1 if checkpoint else 1
    # A step parked at its review (scored, not trained) goes on with the groups the person reviewed.
    kept = scored_step_take(out, step=start, model_step=checkpoint.step if checkpoint else 0)
    if config.init_checkpoint and not (Path(config.init_checkpoint) / "adapter_model.safetensors").exists():
        raise TrainingError(f"init_checkpoint {config.init_checkpoint} holds no adapter (adapter_model.safetensors)")
    if config.init_checkpoint:
        refuse_mismatched_parent(config.lora, Path(config.init_checkpoint))
    if distributed.launched_rank() > 0:  # under torchrun only rank 0 reports and writes
        sink = null_sink
    else:
        (out / "config.json").write_text(config.model_dump_json(indent=2))
    sink(RunStarted(run_name=config.name, start_step=start, total_steps=config.steps, resumed=checkpoint is not None,
                    checkpoint_path=str(checkpoint.path) if checkpoint else "",
                    adapter_name=checkpoint.adapter_name if checkpoint else "",
                    scored_step=start if kept is not None else 0))
    try:  # server.gpu_sharing 'auto' becomes none, split or sleep here; a plan that does not fit stops the run
        config, plan = resolve_sharing(config, gpu_reader())
    except TrainingError as err:
        sink(RunFailed(step=start, error=f"TrainingError: {err}"))
        raise
    if plan is not None:
        sink(MemoryPlanned(sharing=plan.sharing, reason=plan.reason, lines=plan.lines(),
                           gpu_memory_utilization=config.server.gpu_memory_utilization
                           if config.server.gpu_sharing in ("split", "sleep") else None))

    def check_fit() -> None:
        """The trainer's step against the memory its GPU has free now (nothing to check without a plan)."""
        if plan is not None:
            check_trainer_fits(trainer.step_bytes(), gpu_index(trainer.device) if trainer.device.startswith("cuda")
                               else plan.trainer_gpus[0], gpu_reader())

    history: list[dict[str, Any]] = []
    step = start
    server = client = None
    # Every trainer call runs on this one thread: torch's CPU thread pool is per thread, and a fresh executor
    # thread each step (asyncio.to_thread) measured 1.5-2.5x slower. Optimizer state is written on another.
    trainer_thread = ThreadPoolExecutor(1, thread_name_prefix="trainer")
    writer = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-writer")
    loop = asyncio.get_running_loop()
    unsaved: Checkpoint | None = None  # the newest checkpoint whose optimizer state is not on disk yet
    ahead: Ahead | None = None
    writes: list[asyncio.Future] = []
    close_endpoint: Any = None
    threads_before: int | None = None  # torch's CPU threads before a pipelined run split the cores

    async def on_trainer(fn: Any, *args: Any) -> Any:
        # An in-process server's engine thread takes over the trainer's calls once it runs (see InProcessServer).
        return await loop.run_in_executor(getattr(server, "executor", None) or trainer_thread, fn, *args)

    async def save_optimizer(wait: bool = True) -> None:
        """Writes the optimizer state of the newest checkpoint on the writer thread, from a snapshot, so training
        goes on meanwhile; `wait` holds until every write is on disk (before a pause, a cancel or the end)."""
        nonlocal unsaved
        if unsaved is not None:
            target, unsaved = unsaved.path / "optimizer.pt", None
            if distributed.rank_and_world()[1] > 1:
                await on_trainer(distributed.send_to_ranks, distributed.SNAPSHOT)
            snapshot = await on_trainer(trainer.optimizer_snapshot)
            writes.append(loop.run_in_executor(writer, save_state, snapshot, target))
        if wait:
            await asyncio.gather(*writes)
            writes.clear()

    pipelined = is_pipelined(config, judged=judged, external_agent=external_agent)
    trainer_options = config.trainer
    if pipelined and trainer_options.tis_cap is None:  # one-step-stale rollouts: corrected by default
        trainer_options = trainer_options.model_copy(update={"tis_cap": config.pipeline.tis_cap})
    try:
        device = pick_device(config.device, require_gpu=config.trainer.require_gpu)
        cores = split_cores(pipelined, config.server.kind, device)
        if cores is not None:  # before the trainer thread computes: it takes the count up when it starts
            threads_before = set_threads(cores[1])
        trainer = await on_trainer(lambda: Trainer(config.base_model, config.lora, config.grpo, device=device,
                                                   seed=config.seed, options=trainer_options,
                                                   temperature=config.sampling.temperature, chat=config.chat))
        rank, world = distributed.rank_and_world()
        if world > 1 and config.trainer.distributed == "none":
            raise TrainingError(f"started as {world} processes (torchrun) but trainer.distributed is 'none': set "
                                "it to ddp or fsdp, or start one process")
        if checkpoint:
            # The adapter of the newest step; the optimizer state of the newest step that has one (every
            # `checkpoint_every` steps and whenever the run stops; a kill may leave a few steps without).
            optimizer_dir = latest_optimizer_state(out, checkpoint.step)
            if optimizer_dir is not None:
                await on_trainer(trainer.load, optimizer_dir)
            await on_trainer(lambda: trainer.load(checkpoint.path, optimizer=False))
        elif config.init_checkpoint:
            await on_trainer(lambda: trainer.load(Path(config.init_checkpoint), optimizer=False))
        sleeping_server = config.server.kind == "vllm" and config.server.gpu_sharing == "sleep"
        if rank > 0 or sleeping_server:  # a sleeping vLLM leaves the trainer what is free before it starts
            check_fit()
        if rank > 0:
            summary = await follow_rank0(trainer, on_trainer, start)
            await on_trainer(distributed.leave)
            return summary
        server = start_server(config.server, config.base_model, out / "server.log", device=device,
                              threads=cores[0] if cores else 0, chat=config.chat)
        if not sleeping_server:  # split: what is left once vLLM holds its share is what the trainer gets
            check_fit()
        model = server.model_name
        if checkpoint:
            server.load_adapter(checkpoint.adapter_name, checkpoint.path)
            model = checkpoint.adapter_name
        elif config.init_checkpoint:  # a fork: step 1 rolls out with the parent's adapter, served as <run>@0
            model = adapter_name(config.name, 0)
            server.load_adapter(model, config.init_checkpoint)
        client = server.async_client()
        model_step = checkpoint.step if checkpoint else 0  # the step whose adapter `model` is (0: base or fork)
        external = None
        if external_agent:
            from training.rl.external import ExternalRollouts, serve_http

            base_url, close_endpoint = serve_http(server, config.server.host)
            external = ExternalRollouts(inbox, rollout_config.options, base_url, config.grpo.group_size,
                                        config.system_prompt, config.sampling.model_dump())

        async def roll_out(step: int, model: str, model_step: int, rolled_out: asyncio.Event) -> StepRollouts:
            """Rolls out every group of `step` at once; scores each group the moment its rollouts are done. A
            game with several players gives one group per (scenario, role): scenario i's are i*R .. i*R+R-1."""
            slots = config.grpo.groups_per_step * len(roles)
            rollouts = StepRollouts(step, model, model_step, [None] * slots, [], started=time.monotonic())
            pending = slots  # groups still rolling out

            async def score(index: int, group: TrajectoryGroup) -> None:
                nonlocal pending
                sink(GroupRolledOut(step=step, group_index=index, scenario_id=group.scenario.id, model=model,
                                    trajectories=len(group.trajectories), errors=group.errors))
                pending -= 1
                if not pending:
                    rolled_out.set()
                await judge(index, group)

            async def judge(index: int, group: TrajectoryGroup) -> None:
                rollouts.scoring.append(await score_group(group, scorer, config.grpo))
                rollouts.groups[index] = group
                sink(group_event(step, index, group))
                if group.judge_report is not None:
                    sink(JudgeUsage(step=step, group_index=index, report=group.judge_report))

            async def rollout_and_score(index: int, scenario: Scenario) -> None:
                groups = await rollout_groups(env, client, model, scenario, rollout_config, config.grpo.group_size)
                await asyncio.gather(*(score(index * len(roles) + r, g) for r, g in enumerate(groups)))

            if kept is not None and step == start:  # rolled out and recorded before a park: not again
                rolled_out.set()
                rollouts.groups = kept
                await scored_step_rescore(kept, judge)  # groups the judge was down for are scored now
                rollouts.finished = time.monotonic()
                return rollouts
            chosen = scenarios_for_step(scenarios, step, config.grpo.groups_per_step, config.seed)
            if external is not None:  # the user's process rolls out; its groups are scored as they arrive
                await external.collect(step, model, chosen, control, sink, score)
            else:
                await asyncio.gather(*(rollout_and_score(i, s) for i, s in enumerate(chosen)))
            rollouts.finished = time.monotonic()
            return rollouts

        ahead = Ahead(roll_out)
        finished_at = 0.0  # when the previous step finished: a pipelined step's wall time counts from there
        for step in range(start, config.steps + 1):
            if not await wait_for_go(control, save_optimizer,
                                     lambda: sink(RunHeld(step=step - 1, trained=True))):  # noqa: B023 - called now
                break
            waited = time.monotonic()
            # Started one step ago when pipelined. Without a review to wait for, the next step's rollouts start
            # as soon as this step's are done, while its groups are still being scored.
            early = pipelined and review is None and step < config.steps and control.state() == "run"
            rollouts = await ahead.take(step, model, model_step, start_next=early)
            if external_agent and control.state() == "cancel":  # it stopped waiting for the groups: no step
                break
            started, waited = max(rollouts.started, finished_at), time.monotonic() - waited
            done = [g for g in rollouts.groups if g is not None]
            rollout_time = rollouts.finished - rollouts.started  # rollout-and-judge: until the last group scored
            # A rollout that raised, or that came back marked with an error (an MCP server fault), failed.
            failures = [e for g in done for e in [*g.errors, *(t.error for t in g.trajectories if t.error)]]
            attempted = config.grpo.group_size * len(done)
            if len(failures) > config.max_rollout_failures * attempted:
                raise TrainingError(f"{len(failures)} of {attempted} rollouts failed in step {step}; first error: "
                                    f"{failures[0]}")
            if outages := [g.judge_outage for g in done if g.judge_outage]:
                # The judge's provider is down or limiting: the step waits for it (parked by the web app)
                # instead of failing, and nothing rolled out or scored is lost meanwhile.
                scored_step_keep(out, step=step, model_step=rollouts.model_step, groups=rollouts.groups)
                sink(JudgeUnavailable(step=step, detail=outages[0], groups=len(outages)))
                break
            unscored = [g.scoring_error for g in done if g.scoring_error]
            if len(unscored) > config.max_scoring_failures * len(done):
                raise TrainingError(f"{len(unscored)} of {len(done)} groups could not be scored in step {step}; "
                                    f"first error: {unscored[0]}")

            if review is not None:  # a person may change rewards before this step trains on them
                sink(ReviewRequested(step=step))
                await review(step, done)
                if control.state() == "cancel":  # stopped while waiting for a person (a park): the next engine
                    # takes these groups up at this review; nothing reviewed was applied, so nothing says so
                    scored_step_keep(out, step=step, model_step=rollouts.model_step, groups=rollouts.groups)
                    break
                for g in done:
                    apply_scores(g, config.grpo)
                sink(ReviewApplied(step=step, groups=[
                    {"group_index": i, "rewards": [t.reward for t in g.trajectories],
                     "advantages": [t.advantage for t in g.trajectories], "skipped": g.skipped}
                    for i, g in enumerate(rollouts.groups) if g is not None]))
            if pipelined and not early and step < config.steps and control.state() == "run":
                ahead.start(step + 1, model, model_step)  # after the review; with the adapter this step trains on
            if not await wait_for_go(control, save_optimizer,
                                     lambda: sink(RunHeld(step=step, trained=False))):  # noqa: B023 - called now
                break

            t0 = time.monotonic()
            if world > 1:  # every rank trains its share of this step's rows
                await on_trainer(distributed.send_to_ranks, done)
            if server.sleeps_during_training:  # one GPU for both: vLLM frees it while the trainer steps
                server.sleep()
            train_metrics = await on_trainer(trainer.train_step, done)
            train_time = time.monotonic() - t0
            sink(TrainStep(step=step, metrics=train_metrics))
            if server.sleeps_during_training:
                await on_trainer(release_cached_memory, trainer.device)  # what the step freed goes back to vLLM
                server.wake_up()

            # The adapter of every step is committed before it is served, so the newest one is always
            # resumable; the (larger) optimizer state is written every `checkpoint_every` steps, off this path.
            t0 = time.monotonic()
            staging, final = checkpoint_dir(out, step).with_suffix(".partial"), checkpoint_dir(out, step)
            name = adapter_name(config.name, step)
            await on_trainer(trainer.save_adapter, staging)
            (staging / "state.json").write_text(json.dumps({"step": step, "adapter_name": name}, indent=2))
            commit_checkpoint(staging, final)
            scored_step_discard(out)  # the kept step (if any) has trained
            checkpoint = unsaved = Checkpoint(step, final, name)
            if step % config.checkpoint_every == 0:
                await save_optimizer(wait=False)
            sink(CheckpointSaved(step=step, path=str(final), adapter_name=name))
            server.load_adapter(name, final)
            model, model_step = name, step
            if rollouts.model not in (server.model_name, ahead.model):  # the rollouts ahead still sample with it
                server.unload_adapter(rollouts.model)
            load_time = time.monotonic() - t0

            finished_at = time.monotonic()
            metrics = {"step": step, **step_metrics(done), **train_metrics, "time_rollout_s": rollout_time,
                       "time_scoring_s": covered_seconds(rollouts.scoring), "time_train_s": train_time,
                       "time_load_s": load_time, "time_wait_rollouts_s": waited,
                       "time_step_s": finished_at - started, "rollout_model": rollouts.model,
                       "staleness": rollouts.staleness, "adapter": name}
            # Monitors every step, held-out evaluation when due (training/monitoring/checks.py).
            metrics |= await checks.after_step(step, done, train_metrics, client, model=name,
                                               base_model=server.model_name)
            history.append(metrics)
            sink(StepFinished(step=step, metrics=metrics))
        else:
            step = config.steps + 1
        await ahead.discard()  # a cancel leaves the next step's rollouts unused: a resume redoes that step
        await save_optimizer()  # finished or cancelled: the newest checkpoint resumes exactly
        if world > 1:  # the other ranks stop with this run's status (after the snapshot they take part in)
            await on_trainer(distributed.send_to_ranks, "completed" if step > config.steps else "cancelled")
            await on_trainer(distributed.leave)
    except Exception as err:
        sink(RunFailed(step=step, error=f"{type(err).__name__}: {err}"))
        try:
            await save_optimizer()  # the steps trained so far stay resumable
        except Exception:  # noqa: BLE001 - the run's own error is the one to report
            pass
        raise
    finally:
        if ahead is not None:
            await ahead.discard()
        if close_endpoint is not None:
            close_endpoint()
        if server is not None:
            server.stop()
        writer.shutdown(wait=True)
        trainer_thread.shutdown(wait=True)
        if threads_before is not None:
            set_threads(threads_before)
        if client is not None:
            await close_client(client)
    status = "completed" if step > config.steps else "cancelled"
    steps_done = checkpoint.step if checkpoint else 0
    sink(RunFinished(status=status, steps_done=steps_done))
    return RunSummary(status=status, steps_done=steps_done, last_checkpoint=checkpoint, history=history)
