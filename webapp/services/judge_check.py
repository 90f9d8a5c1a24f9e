"""The judge check from the web app (judging/bias.py) on a fixed set of the project's stored groups: the most
recent CHECK_GROUPS groups with at least two answers, so a rerun on the same project checks the same groups."""
from __future__ import annotations

import asyncio

from django.core.exceptions import ValidationError

from judging.bias import BiasReport, judge_check
from judging.errors import JudgeError
from webapp.models import JudgeConfig, Role, TrajectoryGroup
from webapp.services.access import require_role
from webapp.services.playground import judge_request_params

CHECK_GROUPS = 6


def judge_check_groups(*, judge: JudgeConfig) -> list[TrajectoryGroup]:
    groups = (TrajectoryGroup.objects.filter(run__project=judge.project_id).order_by("-id")
              .prefetch_related("trajectories"))
    chosen = []
    for g in groups[:200]:
        if sum(1 for t in g.trajectories.all() if not t.error) >= 2:
            chosen.append(g)
        if len(chosen) == CHECK_GROUPS:
            break
    return sorted(chosen, key=lambda g: g.id)


def judge_check_run(*, user, judge: JudgeConfig, passes: int = 3) -> tuple[BiasReport, list[TrajectoryGroup]]:
    require_role(user=user, project=judge.project, role=Role.EDITOR)
    if not 2 <= passes <= 8:
        raise ValidationError({"passes": ["compare 2 to 8 passes"]})
    groups = judge_check_groups(judge=judge)
    if not groups:
        raise ValidationError({"groups": ["no stored groups with two or more answers yet: run a few steps first"]})
    lists = [[t.messages for t in sorted(g.trajectories.all(), key=lambda t: t.index) if not t.error]
             for g in groups]
    try:
        report = asyncio.run(judge_check(lists, judge.model, passes=passes,
                                         extra_litellm_params=judge_request_params(judge=judge)))
    except (JudgeError, ValueError) as err:
        raise ValidationError({"judge": [str(err)]}) from None
    return report, groups
