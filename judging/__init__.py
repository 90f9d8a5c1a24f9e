"""Rubric Studio's judge: relative scoring of a group of trajectories by any litellm model (RULER-style).

    scores = await judging.ruler(message_lists, "openai/gpt-4o-mini", rubric="...")

Validated (scores mapped by id, corrective retries, no silent clamping), cached on disk, shuffled against
position bias, optionally multi-pass and multi-criterion, with token and cost accounting per call.
Pure Python: never imports Django, the web app or the training engine; litellm is imported on first use.
CLI: `python -m judging score GROUPS.jsonl --judge-model M` (see docs/judging.md).
"""
from __future__ import annotations

from judging import agreement
from judging.core import ConcurrencyLimit, ruler, score_group, score_groups
from judging.errors import JudgeError
from judging.prompt import DEFAULT_RUBRIC
from judging.types import Criterion, GroupJudgement, JudgeCall, JudgeOptions, TrajectoryScore

__all__ = [
    "ConcurrencyLimit", "Criterion", "DEFAULT_RUBRIC", "GroupJudgement", "JudgeCall", "JudgeError",
    "JudgeOptions", "TrajectoryScore", "agreement", "ruler", "score_group", "score_groups",
]
