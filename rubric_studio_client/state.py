"""The run as the client sees it: `RunState` (the API's `GET /api/runs/<id>/rollouts/`), the `Step` to roll out,
and `Submitted`, one finished trajectory of a group."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ENDED = frozenset({"completed", "failed", "cancelled", "crashed"})
# The sampling settings that are also `chat.completions.create` arguments.
_CREATE_ARGS = ("temperature", "top_p", "max_tokens")


@dataclass(frozen=True)
class GroupState:
    """One group the run wants for its current step: a scenario to roll out `group_size` times."""

    group_index: int
    scenario: dict[str, Any]
    submitted: bool = False


@dataclass(frozen=True)
class RunState:
    """A snapshot of the run. `step` is the step waiting for groups (None between steps, while it trains, before
    it starts and after it ends); `deadline_s` is how many seconds that step still waits."""

    run: int
    name: str
    status: str
    step: int | None
    model: str | None
    deadline_s: float | None
    timeout_s: float | None
    on_missing: str | None
    allow_unsampled: bool
    group_size: int | None
    system_prompt: str
    sampling: dict[str, Any]
    total_steps: int | None
    openai_base_url: str
    groups: tuple[GroupState, ...] = ()

    @property
    def ended(self) -> bool:
        """The run is over (completed, failed, cancelled or crashed): no step will come."""
        return self.status in ENDED

    @property
    def paused(self) -> bool:
        return self.status == "paused"

    @property
    def open_groups(self) -> tuple[GroupState, ...]:
        """The current step's groups nobody has submitted yet."""
        return tuple(g for g in self.groups if not g.submitted)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        groups = tuple(GroupState(group_index=int(g["group_index"]), scenario=dict(g.get("scenario") or {}),
                                  submitted=bool(g.get("submitted"))) for g in data.get("groups") or ())
        return cls(run=int(data["run"]), name=str(data.get("name") or ""), status=str(data["status"]),
                   step=data.get("step"), model=data.get("model"), deadline_s=data.get("deadline_s"),
                   timeout_s=data.get("timeout_s"), on_missing=data.get("on_missing"),
                   allow_unsampled=bool(data.get("allow_unsampled")), group_size=data.get("group_size"),
                   system_prompt=str(data.get("system_prompt") or ""), sampling=dict(data.get("sampling") or {}),
                   total_steps=data.get("total_steps"), openai_base_url=str(data.get("openai_base_url") or ""),
                   groups=groups)


@dataclass(frozen=True)
class Step:
    """A step to roll out: for each group, sample `group_size` trajectories of its scenario with `model` (the
    adapter this step trains from) and the run's `sampling` settings, then submit the group."""

    step: int
    model: str
    group_size: int
    system_prompt: str
    sampling: dict[str, Any]
    groups: tuple[GroupState, ...]
    deadline_s: float | None = None
    total_steps: int | None = None

    def messages(self, scenario: dict[str, Any]) -> list[dict[str, Any]]:
        """The conversation the built-in environments open with: the agent's system prompt (if any), then the
        scenario's user message, with its context appended."""
        user = str(scenario.get("user_message") or "")
        if scenario.get("context"):
            user = f"{user}\n\nContext:\n{scenario['context']}"
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": user}]

    def completion_args(self) -> dict[str, Any]:
        """`model` and the run's sampling settings as keyword arguments of `chat.completions.create`."""
        args = {k: v for k, v in self.sampling.items() if k in _CREATE_ARGS and v is not None}
        return {"model": self.model, **args}


@dataclass
class Submitted:
    """One finished trajectory of a group: `trajectory` is the id its calls were tagged with (or the object
    `RunHandle.trajectory()` yielded), `reward` an optional environment reward of your own, `messages` the
    final conversation (None: the last recorded call's request and answer), `metadata` anything JSON."""

    trajectory: Any
    reward: float | None = None
    metadata: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None

    @property
    def id(self) -> str:
        return self.trajectory if isinstance(self.trajectory, str) else str(self.trajectory.id)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id}
        if self.messages is not None:
            body["messages"] = self.messages
        if self.reward is not None:
            body["reward"] = float(self.reward)
        if self.metadata:
            body["metadata"] = self.metadata
        return body


@dataclass
class Trajectory:
    """The trajectory a `RunHandle.trajectory()` context tags calls with. `id` goes out as `X-Trajectory-Id`;
    set `reward`, `metadata` or `messages` on it inside a rollout and `RunHandle.train` submits them."""

    id: str
    reward: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
