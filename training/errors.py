from __future__ import annotations


class TrainingError(RuntimeError):
    """A failure of the engine with a message that says what to do about it."""
