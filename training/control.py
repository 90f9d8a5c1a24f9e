"""How the outside world steers a running loop: pause, resume, cancel.

The loop polls `control.state()` between phases; a pause holds the loop at the next phase boundary until the
state changes. The web app implements this on the Run row; the CLI uses `StaticControl`.
"""
from __future__ import annotations

from typing import Literal, Protocol

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
