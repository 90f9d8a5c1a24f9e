"""What a run's loop runs after each step besides training: the monitors, and the held-out evaluation when due.

Kept out of the loops (training/rl/loop.py, training/sft/loop.py) so each stays one readable page: the GRPO loop
calls `RunChecks.after_step`, the SFT loop `RunChecks.evaluate`.
"""
from __future__ import annotations

import time
from typing import Any

from training.config import RunConfig
from training.environments.scenarios import load_scenarios
from training.events import EvaluationFinished, EventSink, MonitorAlert
from training.monitoring.evaluation import Evaluator, split_scenarios
from training.monitoring.monitors import Monitors, step_signals
from training.types import Scenario, Scorer, TrainingError, TrajectoryGroup


def split_for_run(config: RunConfig, scenarios: list[Scenario]) -> tuple[list[Scenario], list[Scenario]]:
    """(train, held_out) as the run's `evaluation` section says; a bad split is a clear error. An SFT run
    trains on conversations, so every one of its scenarios may be held out."""
    try:
        return split_scenarios(scenarios, config.evaluation, config.seed, require_train=config.kind != "sft")
    except ValueError as err:
        raise TrainingError(str(err)) from None


class RunChecks:
    def __init__(self, *, config: RunConfig, held_out: list[Scenario], env: Any, rollout_config: Any,
                 scorer: Scorer, sink: EventSink) -> None:
        self.sink = sink
        self.monitors = Monitors(config.monitors)
        self.ngram = config.monitors.ngram
        self.evaluator = Evaluator(config=config.evaluation, held_out=held_out, env=env,
                                   rollout_config=rollout_config, scorer=scorer, total_steps=config.steps,
                                   seed=config.seed)

    def _alert(self, alerts: list[MonitorAlert]) -> None:
        for alert in alerts:
            self.sink(alert)

    async def evaluate(self, step: int, client: Any, *, model: str, base_model: str) -> dict[str, Any]:
        result = await self.evaluator.evaluate(step, client, model=model, base_model=base_model)
        metrics = {k: v for k, v in result.items() if k.startswith("eval_")}
        self.sink(EvaluationFinished(step=step, model=model, baseline=base_model, metrics=metrics,
                                     scenarios=result["scenarios"]))
        self._alert(self.monitors.observe_evaluation(step, metrics["eval_win_rate"]))
        return metrics

    async def after_step(self, step: int, groups: list[TrajectoryGroup], train_metrics: dict[str, Any],
                         client: Any, *, model: str, base_model: str) -> dict[str, Any]:
        """Monitor signals and, when due, evaluation metrics, to merge into the step's metrics."""
        signals = step_signals(groups, train_metrics, self.ngram)
        self._alert(self.monitors.observe_step(step, signals))
        extra: dict[str, Any] = dict(signals)
        if self.evaluator.due(step):
            started = time.monotonic()
            extra |= await self.evaluate(step, client, model=model, base_model=base_model)
            extra["time_eval_s"] = time.monotonic() - started
        return extra


async def evaluate_checkpoint(config: RunConfig, checkpoint: str | None, *, scorer: Scorer | None = None,
                              sink: EventSink, baseline: str | None = None) -> dict[str, Any]:
    """An evaluation on demand, outside a training run: the checkpoint's adapter (None: the base model against
    itself, a sanity check that should give 50 %) against the base model, or against an earlier checkpoint's
    adapter (`baseline`), on the run's held-out scenarios."""
    from pathlib import Path

    from training.environments import RolloutConfig, get_environment, parse_options
    from training.servers import close_client, start_server
    from training.model.adapter import pick_device
    from training.types import env_reward_scorer

    _, held_out = split_for_run(config, load_scenarios(config))
    if not held_out:
        raise TrainingError("the config holds out no scenario: set evaluation.held_out_fraction or held_out_ids")
    for path in (checkpoint, baseline):
        if path and not (Path(path) / "adapter_model.safetensors").exists():
            raise TrainingError(f"{path} holds no adapter (adapter_model.safetensors)")
    env = get_environment(config.environment.kind)
    rollout_config = RolloutConfig(config.system_prompt, config.sampling, parse_options(env, config.environment.options))
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    server = start_server(config.server, config.base_model, out / "evaluate-server.log",
                          device=pick_device(config.device), chat=config.chat)
    try:
        model = server.model_name
        if checkpoint:
            model = f"{config.name}@eval"
            server.load_adapter(model, checkpoint)
        base_model = server.model_name
        if baseline:
            base_model = f"{config.name}@baseline"
            server.load_adapter(base_model, baseline)
        client = server.async_client()
        checks = RunChecks(config=config, held_out=held_out, env=env, rollout_config=rollout_config,
                           scorer=scorer or env_reward_scorer, sink=sink)
        label = Path(checkpoint).name.removeprefix("step_") if checkpoint else "0"
        step = int(label) if label.isdigit() else 0  # checkpoints/step_0030 -> 30
        try:
            return await checks.evaluate(step, client, model=model, base_model=base_model)
        finally:
            await close_client(client)
    finally:
        server.stop()
