"""The contract between the engine and whoever watches it (CLI, web app): typed events out, control in.

The loop calls an injected `sink(event)` for each; `event.to_dict()` is the JSON form (with a `kind` key) that the
web app stores as a RunEvent and streams to browsers. A sink must be quick: it runs on the loop's thread.
"""
from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Literal, Protocol

from training.types import JudgeReport


@dataclass
class Event:
    kind: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass
class RunStarted(Event):
    kind: ClassVar[str] = "run_started"
    run_name: str
    start_step: int
    total_steps: int
    resumed: bool
    # The checkpoint resumed from (path, adapter name): a worker killed between saving it and reporting it
    # never recorded it, and the web app records it from here.
    checkpoint_path: str = ""
    adapter_name: str = ""
    # The step whose groups were scored before a park and are taken up without rolling out again (0: none).
    scored_step: int = 0


@dataclass
class MemoryPlanned(Event):
    """The memory plan the run starts with (training/model/gpu/memory_plan.py): how vLLM and the trainer share the GPUs
    (`sharing`: none, split, sleep; cpu without a GPU), why, vLLM's memory share where it is set, and the
    plan's lines as a person reads them."""
    kind: ClassVar[str] = "memory_planned"
    sharing: str
    reason: str
    gpu_memory_utilization: float | None = None
    lines: list[str] = field(default_factory=list)


@dataclass
class GroupRolledOut(Event):
    kind: ClassVar[str] = "group_rolled_out"
    step: int
    group_index: int
    scenario_id: str
    model: str  # the served name the rollouts used: the base model or the adapter `<run>@<step>`
    trajectories: int
    errors: list[str]


@dataclass
class GroupScored(Event):
    """A group with its scores. `trajectories` are Trajectory.to_dict() records (messages included)."""

    kind: ClassVar[str] = "group_scored"
    step: int
    group_index: int
    scenario_id: str
    trajectories: list[dict[str, Any]]
    reward_mean: float | None
    reward_std: float | None
    skipped: bool
    errors: list[str] = field(default_factory=list)
    scoring_error: str | None = None
    role: str = ""  # the part its trajectories played, in a game with several players (training/types.py)


@dataclass
class JudgeUsage(Event):
    """What judging one group cost (emitted right after its GroupScored, also when the judge failed): the
    JudgeReport's fields beside the step and group index. Cache hits are listed but cost nothing."""

    kind: ClassVar[str] = "judge_usage"
    step: int
    group_index: int
    report: JudgeReport

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "step": self.step, "group_index": self.group_index, **asdict(self.report)}


@dataclass
class RolloutsWanted(Event):
    """An external agent's step is open (training/rl/external.py): what its process rolls out, with which adapter
    (`model`) through which endpoint, and until when. Scenarios go without their reference answers (the judge's)."""

    kind: ClassVar[str] = "rollouts_wanted"
    step: int
    model: str
    base_url: str
    timeout_s: float
    on_missing: str
    allow_unsampled: bool
    group_size: int
    system_prompt: str
    sampling: dict[str, Any]
    groups: list[dict[str, Any]]  # {"group_index", "scenario": {"id", "user_message", "context", "metadata"}}


@dataclass
class RolloutsClosed(Event):
    """An external agent's step stopped waiting: the groups that came and those that did not."""

    kind: ClassVar[str] = "rollouts_closed"
    step: int
    received: list[int]
    missing: list[int]


@dataclass
class JudgeUnavailable(Event):
    """The judge's provider was down or limiting beyond its retries while scoring `step` (`detail`: "x answered
    503"): the engine kept the step (training/parking) and stops, to take it up again once the judge answers."""
    kind: ClassVar[str] = "judge_unavailable"
    step: int
    detail: str
    groups: int = 1  # how many of the step's groups it could not score


@dataclass
class JudgeBudgetWait(Event):
    """The judge's requests wait for the budget their key variable shares with other runs (`what`: concurrency
    or rate; `limit`: its requests in flight, or per minute). Said at most every few seconds while it lasts."""
    kind: ClassVar[str] = "judge_budget_wait"
    key: str
    what: str
    limit: float


@dataclass
class ReviewRequested(Event):
    kind: ClassVar[str] = "review_requested"
    step: int


@dataclass
class ReviewApplied(Event):
    """After the review hook: the rewards each group trains on and the advantages recomputed from them.
    `groups` holds {"group_index", "rewards", "advantages", "skipped"}, one per group, trajectories in order."""

    kind: ClassVar[str] = "review_applied"
    step: int
    groups: list[dict[str, Any]]


@dataclass
class TrainStep(Event):
    kind: ClassVar[str] = "train_step"
    step: int
    metrics: dict[str, float]


@dataclass
class CheckpointSaved(Event):
    kind: ClassVar[str] = "checkpoint_saved"
    step: int
    path: str
    adapter_name: str


@dataclass
class RunHeld(Event):
    """The engine holds at a boundary for a pause: after step `step` trained, or (trained False) before it trains."""
    kind: ClassVar[str] = "run_held"
    step: int
    trained: bool


@dataclass
class StepFinished(Event):
    kind: ClassVar[str] = "step_finished"
    step: int
    metrics: dict[str, Any]


@dataclass
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    status: Literal["completed", "cancelled"]
    steps_done: int


@dataclass
class RunFailed(Event):
    kind: ClassVar[str] = "run_failed"
    step: int
    error: str


@dataclass
class EvaluationFinished(Event):
    """A held-out evaluation (training.monitoring.evaluation): `metrics` holds eval_win_rate (ties half),
    eval_ci_low/high (95 % bootstrap over scenarios), eval_scenarios, eval_samples (answers per side per scenario),
    eval_comparisons, eval_env_checkpoint/base, ...; `scenarios` the per-scenario comparisons."""

    kind: ClassVar[str] = "evaluation"
    step: int
    model: str
    baseline: str
    metrics: dict[str, Any]
    scenarios: list[dict[str, Any]]


@dataclass
class HeldOutLoss(Event):
    """An SFT run's loss on its held-out conversations, which it never trains on: the mean cross-entropy over
    their assistant tokens after `step`, the tokens that mean rests on, and the conversations."""

    kind: ClassVar[str] = "held_out_loss"
    step: int
    loss: float | None
    tokens: int
    conversations: int


@dataclass
class MonitorAlert(Event):
    """A monitor crossed its threshold (training.monitoring.monitors); `pause` asks the watcher to pause the run."""

    kind: ClassVar[str] = "monitor_alert"
    step: int
    monitor: str
    value: float
    threshold: float
    message: str
    pause: bool


@dataclass
class TrackerFailed(Event):
    """An experiment tracker (training/monitoring/trackers.py) failed: it is dropped for the rest of the run, which goes
    on."""

    kind: ClassVar[str] = "tracker_failed"
    tracker: str
    error: str


EventSink = Callable[[Event], None]


def null_sink(event: Event) -> None:
    """A sink that ignores everything (the default)."""


# How the outside world steers a running loop: pause, resume, cancel.
#
# The loop polls `control.state()` between phases; a pause holds the loop at the next phase boundary until the
# state changes. The web app implements this on the Run row; the CLI uses `StaticControl`.

ControlState = Literal["run", "pause", "cancel"]


class Control(Protocol):
    def state(self) -> ControlState: ...


class StaticControl:
    """A control whose state is set in-process (CLI, tests)."""

    def __init__(self, state: ControlState = "run") -> None:
        self._state: ControlState = state

    def set(self, state: ControlState) -> None:
        self._state = state

    def state(self) -> ControlState:
        return self._state


async def wait_for_go(control: Control, on_hold: Any = None, on_pause: Any = None) -> bool:
    """Holds while paused; False when the run is cancelled. `on_hold` runs once before a pause or a cancel;
    `on_pause()` (not awaited) once the loop holds for a pause, after `on_hold`: whoever watches is told the engine
    has stopped working, so a page does not go on saying "pausing" (a pause may land between two boundaries whose
    events would otherwise say so)."""
    if control.state() != "run" and on_hold is not None:
        await on_hold()
    if control.state() == "pause" and on_pause is not None:
        on_pause()
    while (state := control.state()) == "pause":
        await asyncio.sleep(0.2)
    return state != "cancel"
