"""Reads of a project's catalogue: agents, scenario sets, rubrics and their versions."""
from __future__ import annotations

from typing import Any

from django.db.models import Count, Prefetch, Q, QuerySet

from webapp.models import Agent, JudgeConfig, McpServer, Project, Rubric, Run, ScenarioSet

def catalogue_for_project(*, project: Project) -> dict[str, QuerySet]:
    return {
        "agents": Agent.objects.filter(project=project),
        "scenario_sets": ScenarioSet.objects.filter(project=project).annotate(
            n=Count("scenarios", filter=Q(scenarios__retired=False))),
        "rubrics": Rubric.objects.filter(project=project).annotate(n=Count("versions")),
        "judges": JudgeConfig.objects.filter(project=project),
        "mcp_servers": McpServer.objects.filter(project=project),
    }


def rubric_versions(*, rubric: Rubric) -> list[Any]:
    """Newest first, each with the runs that used it (a version is frozen into a run at launch)."""
    versions = list(rubric.versions.select_related("created_by").order_by("-number")
                    .prefetch_related(Prefetch("run_set", queryset=Run.objects.order_by("-created_at", "-id"))))
    return versions


def rubric_version_diff(*, rubric: Rubric, old: str | None, new: str | None) -> dict[str, Any] | None:
    """Word-level diff of two versions (by number; default: the one before the latest against the latest)."""
    from webapp.selectors.review import answer_diff

    numbers = list(rubric.versions.order_by("-number").values_list("number", flat=True))
    if len(numbers) < 2:
        return None
    b = int(new) if (new or "").isdigit() and int(new) in numbers else numbers[0]
    a = int(old) if (old or "").isdigit() and int(old) in numbers else None
    a = a or next((n for n in numbers if n < b), numbers[-1])
    va, vb = rubric.versions.get(number=a), rubric.versions.get(number=b)
    return {"old": va, "new": vb, "numbers": numbers, "segments": answer_diff(va.text, vb.text),
            "criteria_changed": va.criteria != vb.criteria}


def judges_default_first(*, project: Project) -> list[JudgeConfig]:
    """The project's judges, its default first: the judge of its newest run that had one (what the project has
    been training with), else the first one made; then the others by name. Pages that preselect a judge start
    from this order, so a judge is never chosen only for coming first in the alphabet."""
    judges = list(JudgeConfig.objects.filter(project=project).order_by("name", "id"))
    last_used = (Run.objects.filter(project=project, judge_config__isnull=False).order_by("-created_at", "-id")
                 .values_list("judge_config_id", flat=True).first())
    default_id = last_used or min((j.id for j in judges), default=None)
    return sorted(judges, key=lambda j: j.id != default_id)  # stable: the rest keep their order by name


def agent_trains_on_own_reward(*, agent: Agent | None) -> bool:
    """Whether the agent's environment rewards its rollouts itself (the games, 2048): a judge is then an extra
    the person asks for, never a default the launch form picks for them."""
    from training.environments import get_environment

    if agent is None:
        return False
    try:
        return get_environment(agent.environment_kind).has_own_reward(agent.environment_options or {}) is True
    except Exception:  # noqa: BLE001 - an unknown kind says nothing about its reward
        return False
