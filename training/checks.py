"""What the loop runs after each step besides training: the monitors, and the held-out evaluation when due.

Kept out of training/loop.py so the loop stays one readable page; the loop calls `RunChecks.after_step`.
"""
from __future__ import annotations

import time
from typing import Any

from training.config import RunConfig
from training.errors import TrainingError
from training.evaluation import Evaluator, split_scenarios
from training.events import EvaluationFinished, EventSink, MonitorAlert
from training.monitors import Monitors, step_signals
from training.types import Scenario, Scorer, TrajectoryGroup


def split_for_run(config: RunConfig, scenarios: list[Scenario]) -> tuple[list[Scenario], list[Scenario]]:
    """(train, held_out) as the run's `evaluation` section says; a bad split is a clear error."""
    try:
        return split_scenarios(scenarios, config.evaluation, config.seed)
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

    def _alert(self, alerts: list) -> None:
        for a in alerts:
            self.sink(MonitorAlert(step=a.step, monitor=a.monitor, value=a.value, threshold=a.threshold,
                                   message=a.message, pause=a.pause))

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
