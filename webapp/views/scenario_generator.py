"""The scenario generator page: describe the task, let the project's judge model draft scenarios, review and
edit them, accept the ones to keep into the scenario set (webapp/services/scenario_drafts.py)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from webapp.input_rules import whole_number
from webapp.selectors import access
from webapp.selectors.catalogue import judges_default_first
from webapp.models import JudgeConfig, McpServer, Role, ScenarioSet
from webapp.services.judge_probe import judge_pick_working
from webapp.services.scenario_drafts import scenario_drafts_generate, scenario_set_accept_drafts

MAX_ROWS = 50


def _rows(post) -> list[dict]:
    """The reviewed drafts as posted: row i has user_message-i, reference-i, difficulty-i, split-i, keep-i."""
    rows = []
    for i in range(MAX_ROWS):
        if f"user_message-{i}" not in post:
            break
        if post.get(f"keep-{i}"):
            rows.append({"user_message": post[f"user_message-{i}"].strip(),
                         "reference": post.get(f"reference-{i}", "").strip() or None,
                         "difficulty": post.get(f"difficulty-{i}", "medium"), "split": post.get(f"split-{i}")})
    return rows


@login_required
def scenario_set_generate(request: HttpRequest, scenario_set_id: int) -> HttpResponse:
    scenario_set = access.in_project_get(user=request.user, model=ScenarioSet, pk=scenario_set_id,
                                            role=Role.EDITOR)
    judges = JudgeConfig.objects.filter(project=scenario_set.project).order_by("name")
    servers = McpServer.objects.filter(project=scenario_set.project).order_by("name")
    # Preselected: a judge that answered lately, or whose key is at hand; among equals the project's default
    # (the judge its runs use), not merely the first by name.
    default = judge_pick_working(judges=judges_default_first(project=scenario_set.project))
    context = {"project": scenario_set.project, "scenario_set": scenario_set, "judges": judges, "errors": [],
               "task": "", "n": 8, "judge_id": default.pk if default else None, "drafts": None, "mcp_servers": servers,
               "mcp_server": None}
    action = request.POST.get("action")
    if request.method == "POST" and action == "draft":
        context["task"] = request.POST.get("task", "")
        try:
            context["n"] = int(request.POST.get("n") or 8)
            judge = judges.get(pk=whole_number(request.POST.get("judge") or 0, name="judge"))
            context["judge_id"] = judge.pk
            server_id = request.POST.get("mcp_server") or ""
            context["mcp_server"] = servers.get(pk=whole_number(server_id, name="mcp_server")) if server_id else None
            result = scenario_drafts_generate(user=request.user, scenario_set=scenario_set, judge=judge,
                                              task=context["task"], n=context["n"],
                                              mcp_server=context["mcp_server"])
            context["drafts"], context["duplicates"] = result.scenarios, result.duplicates_removed
        except (ValueError, JudgeConfig.DoesNotExist, McpServer.DoesNotExist):
            context["errors"] = ["choose a judge, a number of scenarios and (optionally) an MCP server"]
        except ValidationError as err:
            context["errors"] = [m for ms in err.message_dict.values() for m in ms]
    elif request.method == "POST" and action == "accept":
        try:
            created = scenario_set_accept_drafts(user=request.user, scenario_set=scenario_set,
                                                 drafts=_rows(request.POST), task=request.POST.get("task", ""),
                                                 mcp_server_name=request.POST.get("mcp_server_name", ""))
            messages.success(request, f"added {len(created)} generated scenarios")
            return redirect("scenario-set-detail", scenario_set_id=scenario_set.id)
        except ValidationError as err:
            context["errors"] = [m for ms in err.message_dict.values() for m in ms]
    status = 400 if context["errors"] else 200
    return render(request, "webapp/scenario_generate.html", context, status=status)
