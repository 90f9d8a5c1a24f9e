"""Rubric Studio's client for external rollouts: your agent runs in your own code, samples through the run's
OpenAI-compatible endpoint, and hands finished groups back; Rubric Studio judges and trains them.

Only httpx and openai (no Django, no torch). See docs/your-agent.md.

    from rubric_studio_client import StudioClient

    async def rollout(run, step, scenario):
        reply = await run.openai.chat.completions.create(messages=step.messages(scenario), **step.completion_args())
        return None  # or a reward of your own; None leaves the score to the run's judge

    async with StudioClient("http://127.0.0.1:8000", token="rs_...") as studio:
        run = await studio.run(12)
        await run.train(rollout)
"""
from __future__ import annotations

from rubric_studio_client.client import (
    CLIENT_HEADER, TRAJECTORY_HEADER, RolloutFailed, RunHandle, StudioClient, current_trajectory,
)
from rubric_studio_client.errors import (
    Forbidden, Invalid, NotFound, RateLimited, Refused, ServerError, StepClosed, StudioError, TooLarge,
    Unauthorized, Unreachable, Unsampled,
)
from rubric_studio_client.state import GroupState, RunState, Step, Submitted, Trajectory

__all__ = [
    "CLIENT_HEADER", "TRAJECTORY_HEADER", "Forbidden", "GroupState", "Invalid", "NotFound", "RateLimited", "Refused",
    "RolloutFailed", "RunHandle", "RunState", "ServerError", "Step", "StepClosed", "StudioClient", "StudioError",
    "Submitted", "TooLarge", "Trajectory", "Unauthorized", "Unreachable", "Unsampled", "current_trajectory",
]
