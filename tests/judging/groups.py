"""Builders for judge tests: conversations that share a prefix, and the rule the double scores them by."""
from __future__ import annotations

import re
from typing import Any

from tests.judge_double import JudgeDouble

SYSTEM = {"role": "system", "content": "You are a support agent. Answer using only the retrieved context."}
USER = {"role": "user", "content": "What is the refund policy? Context: refunds within 30 days of purchase."}


def trajectory(quality: float, *, turns: int = 1, tag: str = "") -> list[dict[str, Any]]:
    """A conversation starting with SYSTEM and USER; the agent's turns carry `quality 0.xx`, which the rule
    responder reads back as the score."""
    msgs: list[dict[str, Any]] = [SYSTEM, USER]
    for t in range(turns):
        if t:
            msgs.append({"role": "user", "content": f"follow-up {t}"})
        msgs.append({"role": "assistant", "content": f"answer {tag} turn {t} quality {quality:.2f}"})
    return msgs


def quality_rule(text: str) -> float:
    """Score a trajectory block by the quality marker of its last assistant turn."""
    return float(re.findall(r"quality (\d\.\d+)", text)[-1])


def judge_kwargs(double: JudgeDouble, **options: Any) -> dict[str, Any]:
    """Keyword arguments for ruler/score_group pointed at the double, with instant transport retries."""
    return {"judge_model": double.model, "extra_litellm_params": double.litellm_params, "backoff_s": 0.0,
            **options}
