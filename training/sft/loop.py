"""The SFT run kind, top to bottom: read the conversations, hold some out, encode them with the chat template
(assistant tokens trained, as GRPO trains its trajectories), plan the steps (epochs cut by a token budget,
packed), then for each step: wait while paused, train at the scheduled learning rate, report the loss, measure
the held-out loss when due, save a checkpoint when due, and run the held-out win-rate evaluation against the
base model when due (every run kind's evaluation: training/monitoring/checks.py, with a server started for it).

Reached through the engine's one entry, `training.train` (it hands `kind: "sft"` configs here), so the CLI
(`python -m training sft --config FILE.json`, or `run`), the web app's engine process and library callers start
SFT runs as they start GRPO runs, and see the same events, checkpoints and summary.
"""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from training.config import RunConfig
from training.config.sft import SFTOptions, learning_rate_at
from training.events import (CheckpointSaved, Control, EventSink, HeldOutLoss, RunFailed, RunFinished, RunHeld,
                             RunStarted, StaticControl, StepFinished, TrainStep, null_sink, wait_for_go)
from training.model.checkpoints import (Checkpoint, RunSummary, adapter_name, checkpoint_dir, commit_checkpoint,
                                        latest_checkpoint)
from training.model.prompt_budget import model_context
from training.sft.data import Conversation, conversation_parse, read_conversations, split_held_out
from training.sft.packing import Encoded, check_lengths, plan_run
from training.types import Scenario, Scorer, TrainingError


def load_sft_conversations(options: SFTOptions) -> list[Conversation]:
    """The run's conversations: its data file, or the inline ones, checked like an upload."""
    if options.data_file:
        return read_conversations(options.data_file)
    if not options.conversations:
        raise TrainingError("an SFT run needs conversations: set sft.data_file (a JSONL file) or sft.conversations")
    parsed, errors = [], []
    for i, row in enumerate(options.conversations, start=1):
        conversation, problems = conversation_parse(row, line=i)
        errors += problems
        if conversation is not None:
            parsed.append(conversation)
    if errors:
        raise TrainingError("sft.conversations: " + "; ".join(str(e).replace("line", "conversation", 1)
                                                               for e in errors[:5]))
    return parsed


def evaluation_scenarios(config: RunConfig) -> list[Scenario]:
    """The scenarios of the held-out win rate: those `evaluation` holds out (every one may be: none is trained)."""
    from training.monitoring.evaluation import split_scenarios
    from training.environments.scenarios import load_scenarios

    if not config.evaluation.enabled or not (config.scenarios or config.scenarios_file):
        return []
    try:
        return split_scenarios(load_scenarios(config), config.evaluation, config.seed, require_train=False)[1]
    except ValueError as err:
        raise TrainingError(str(err)) from None


async def train_sft(config: RunConfig, *, scorer: Scorer | None = None, sink: EventSink = null_sink,
                    control: Control | None = None, **_unused: Any) -> RunSummary:
    """Trains an SFT run. No review gate or inbox: nothing is scored."""
    from training.sft.trainer import SFTTrainer
    from training.model.adapter import pick_device
    from training.servers import close_client

    options = config.sft or SFTOptions()
    control = control or StaticControl()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    conversations = load_sft_conversations(options)
    train_ids, held_ids = split_held_out(conversations, options.held_out_fraction, config.seed)
    scenarios = evaluation_scenarios(config)
    if config.init_checkpoint and not (Path(config.init_checkpoint) / "adapter_model.safetensors").exists():
        raise TrainingError(f"init_checkpoint {config.init_checkpoint} holds no adapter (adapter_model.safetensors)")
    (out / "config.json").write_text(config.model_dump_json(indent=2))

    trainer_thread = ThreadPoolExecutor(1, thread_name_prefix="trainer")  # torch's thread pool is per thread
    loop = asyncio.get_running_loop()
    server: Any = None
    checkpoint = latest_checkpoint(out)
    step = start = checkpoint.step + 1 if checkpoint else 1
    history: list[dict[str, Any]] = []
    evaluation: dict[str, Any] = {}  # its server, client and checks, started when first due

    async def on_trainer(fn: Any, *args: Any) -> Any:
        return await loop.run_in_executor(getattr(server, "executor", None) or trainer_thread, fn, *args)

    try:
        device = pick_device(config.device, require_gpu=config.trainer.require_gpu)
        trainer = await on_trainer(lambda: SFTTrainer(config.base_model, config.lora, options, device=device,
                                                      seed=config.seed, options=config.trainer, chat=config.chat))
        encoded = await on_trainer(lambda: [_encode(trainer, conversations[i], i) for i in range(len(conversations))])
        check_lengths(encoded, micro_batch_tokens=options.micro_batch_tokens, describe=lambda s: f"conversation {s + 1}",
                      context=model_context(trainer.model.config))
        train_rows, held_rows = [encoded[i] for i in train_ids], [encoded[i] for i in held_ids]
        plan = plan_run(train_rows, epochs=options.epochs, batch_tokens=options.batch_tokens, seed=config.seed,
                        max_steps=options.max_steps)
        if checkpoint:
            await on_trainer(trainer.load, checkpoint.path)  # adapter and optimizer: the run goes on exactly
        elif config.init_checkpoint:
            await on_trainer(lambda: trainer.load(Path(config.init_checkpoint), optimizer=False))
        sink(RunStarted(run_name=config.name, start_step=start, total_steps=plan.total, resumed=checkpoint is not None,
                        checkpoint_path=str(checkpoint.path) if checkpoint else "",
                        adapter_name=checkpoint.adapter_name if checkpoint else ""))
        saved_step = checkpoint.step if checkpoint else 0
        if held_rows and start == 1:  # where the curve starts: the model before any step
            loss, tokens = await on_trainer(trainer.held_out_loss, held_rows)
            sink(HeldOutLoss(step=0, loss=loss, tokens=tokens, conversations=len(held_rows)))

        async def save(at: int) -> None:
            nonlocal checkpoint, saved_step
            if at <= saved_step:
                return
            staging, final = checkpoint_dir(out, at).with_suffix(".partial"), checkpoint_dir(out, at)
            name = adapter_name(config.name, at)
            await on_trainer(_write_checkpoint, trainer, staging, {"step": at, "adapter_name": name, "kind": "sft"})
            commit_checkpoint(staging, final)
            checkpoint, saved_step = Checkpoint(at, final, name), at
            sink(CheckpointSaved(step=at, path=str(final), adapter_name=name))

        last_trained = start - 1
        for step in range(start, plan.total + 1):
            if not await wait_for_go(control, lambda: save(last_trained),
                                     lambda: sink(RunHeld(step=last_trained, trained=True))):  # noqa: B023
                break
            began = time.monotonic()
            epoch, rows = plan.steps[step - 1]
            metrics: dict[str, Any] = await on_trainer(trainer.sft_step, rows,
                                                       learning_rate_at(step, plan.total, options))
            train_time = time.monotonic() - began
            last_trained = step
            sink(TrainStep(step=step, metrics=metrics))
            metrics = {"step": step, "epoch": epoch, **metrics, "time_train_s": train_time,
                       "tokens_per_s": metrics["tokens"] / train_time if train_time > 0 else None}
            last = step == plan.total
            if held_rows and (step % options.eval_every == 0 or last):
                loss, tokens = await on_trainer(trainer.held_out_loss, held_rows)
                sink(HeldOutLoss(step=step, loss=loss, tokens=tokens, conversations=len(held_rows)))
                metrics["eval_loss"] = loss
            win_rate_due = bool(scenarios) and (step % config.evaluation.every == 0 or last)
            if step % options.save_every == 0 or last or win_rate_due:
                await save(step)
            if win_rate_due:
                if server is None:
                    server, evaluation = await _start_evaluation(config, scenarios, scorer, sink, device)
                assert checkpoint is not None
                evaluation["server"].load_adapter(checkpoint.adapter_name, checkpoint.path)
                started = time.monotonic()
                metrics |= await evaluation["checks"].evaluate(step, evaluation["client"], model=checkpoint.adapter_name,
                                                               base_model=server.model_name)
                metrics["time_eval_s"] = time.monotonic() - started
            metrics["time_step_s"] = time.monotonic() - began
            history.append(metrics)
            sink(StepFinished(step=step, metrics=metrics))
        else:
            step = plan.total + 1
        await save(last_trained)  # a cancel or a park leaves its newest step resumable
        status = "completed" if step > plan.total else "cancelled"
    except Exception as err:
        sink(RunFailed(step=step, error=f"{type(err).__name__}: {err}"))
        raise
    finally:
        if server is not None:
            server.stop()
        trainer_thread.shutdown(wait=True)
        if evaluation:
            await close_client(evaluation["client"])
    steps_done = checkpoint.step if checkpoint else 0
    sink(RunFinished(status=status, steps_done=steps_done))
    return RunSummary(status=status, steps_done=steps_done, last_checkpoint=checkpoint, history=history)


def _encode(trainer: Any, conversation: Conversation, index: int) -> Encoded:
    try:
        return trainer.encode(conversation, index)
    except TrainingError as err:
        raise TrainingError(f"conversation {index + 1}: {err}") from None


def _write_checkpoint(trainer: Any, staging: Path, state: dict[str, Any]) -> None:
    """Adapter, optimizer state and state.json, as a GRPO checkpoint holds them (so forks and resumes read it)."""
    import torch

    trainer.save_adapter(staging)
    torch.save(trainer.optimizer.state_dict(), staging / "optimizer.pt")
    (staging / "state.json").write_text(json.dumps(state, indent=2))


async def _start_evaluation(config: RunConfig, scenarios: list[Scenario], scorer: Scorer | None, sink: EventSink,
                            device: str) -> tuple[Any, dict[str, Any]]:
    """The inference server and the checks the held-out win rate needs, started at its first use."""
    from training.monitoring.checks import RunChecks
    from training.environments import RolloutConfig, get_environment, parse_options
    from training.servers import start_server
    from training.types import env_reward_scorer

    env = get_environment(config.environment.kind)
    if config.environment.kind == "external":
        raise TrainingError("the held-out evaluation rolls out with the environment; an external agent's code is "
                            "not here to do it: leave the evaluation off for this SFT run")
    rollout_config = RolloutConfig(config.system_prompt, config.sampling, parse_options(env, config.environment.options))
    await env.launch(rollout_config.options)
    server = start_server(config.server, config.base_model, Path(config.output_dir) / "server.log", device=device,
                          chat=config.chat)
    checks = RunChecks(config=config, held_out=scenarios, env=env, rollout_config=rollout_config,
                       scorer=scorer or env_reward_scorer, sink=sink)
    return server, {"server": server, "client": server.async_client(), "checks": checks}
