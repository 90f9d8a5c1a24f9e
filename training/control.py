"""How the outside world steers a running loop: pause, resume, cancel.

The loop polls `control.state()` between phases; a pause holds the loop at the next phase boundary until the
state changes. The web app implements this on the Run row; the CLI uses `StaticControl`.
"""
from __future__ import annotations

import asyncio
from typing import Any, Literal, Protocol

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
