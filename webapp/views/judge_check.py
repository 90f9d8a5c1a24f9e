"""The judge check page, reached from the judge page: position bias, self-consistency, length bias."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.selectors import access
from webapp.models import JudgeConfig, Role
from webapp.services.judge_check import CHECK_GROUPS, judge_check_groups, judge_check_run


@login_required
def judge_check(request: HttpRequest, judge_id: int) -> HttpResponse:
    judge = access.in_project_get(user=request.user, model=JudgeConfig, pk=judge_id, role=Role.EDITOR)
    context = {"project": judge.project, "judge": judge, "report": None, "errors": [], "size": CHECK_GROUPS,
               "groups": judge_check_groups(judge=judge), "passes": 3}
    if request.method == "POST":
        try:
            context["passes"] = int(request.POST.get("passes") or 3)
            context["report"], context["groups"] = judge_check_run(user=request.user, judge=judge,
                                                                   passes=context["passes"])
        except ValueError:
            context["errors"] = ["passes must be a number"]
        except ValidationError as err:
            context["errors"] = [m for ms in err.message_dict.values() for m in ms]
    return render(request, "webapp/judge_check.html", context, status=400 if context["errors"] else 200)
