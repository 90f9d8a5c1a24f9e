"""Scenarios drafted by an LLM from a task description (judging/scenarios.py), through a project judge's
litellm configuration. Drafts are only shown; nothing is stored until a person accepts (and maybe edits) them."""
from __future__ import annotations

import asyncio
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from pydantic import ValidationError as PydanticError

from judging.errors import JudgeError
from judging.scenarios import DraftResult, DraftScenario, draft_scenarios
from webapp.egress_policy import egress_refusal
from webapp.models import JudgeConfig, McpServer, Role, Scenario, ScenarioSet
from webapp.services.access import require_role
from webapp.services.playground import judge_request_params


def scenario_drafts_generate(*, user, scenario_set: ScenarioSet, judge: JudgeConfig, task: str,
                             n: int, mcp_server: McpServer | None = None) -> DraftResult:
    """`mcp_server`: draft tasks that need its tools (as its last Test connection listed them)."""
    require_role(user=user, project=scenario_set.project, role=Role.EDITOR)
    if judge.project_id != scenario_set.project_id:
        raise ValidationError({"judge": ["choose a judge of this project"]})
    if refusal := egress_refusal(judge.api_base):
        raise ValidationError({"judge": [f"the judge's API base: {refusal}"]})
    if mcp_server is not None and mcp_server.project_id != scenario_set.project_id:
        raise ValidationError({"mcp_server": ["choose an MCP server of this project"]})
    if mcp_server is not None and not mcp_server.tools:
        raise ValidationError({"mcp_server": [f"no tools of the MCP server {mcp_server.name!r} are known yet: use "
                                              "Test connection on its page first"]})
    try:
        params = judge_request_params(judge=judge)
        return asyncio.run(draft_scenarios(task, n=n, model=judge.model, extra_litellm_params=params,
                                           tools=mcp_server.tools if mcp_server is not None else None))
    except (JudgeError, ValueError) as err:
        raise ValidationError({"task": [str(err)]}) from None


def scenario_set_accept_drafts(*, user, scenario_set: ScenarioSet, drafts: list[dict[str, Any]],
                               task: str, mcp_server_name: str = "") -> list[Scenario]:
    """Adds the accepted drafts (as edited) to the set; all or nothing. Ids are gen-1, gen-2, ... after the
    set's existing ones; `split` is train or validation (held out for evaluation)."""
    require_role(user=user, project=scenario_set.project, role=Role.EDITOR)
    rows, errors = [], []
    for i, d in enumerate(drafts, start=1):
        split = d.get("split") or Scenario.Split.TRAIN
        try:
            draft = DraftScenario.model_validate({k: d.get(k) for k in ("user_message", "reference", "difficulty")})
        except PydanticError as err:
            errors.append(f"draft {i}: {err.errors()[0]['loc'][0]}: {err.errors()[0]['msg']}")
            continue
        if split not in Scenario.Split.values:
            errors.append(f"draft {i}: split must be train or validation")
            continue
        rows.append((draft, split))
    if errors:
        raise ValidationError({"drafts": errors})
    if not rows:
        raise ValidationError({"drafts": ["keep at least one draft"]})
    with transaction.atomic():
        taken = set(scenario_set.scenarios.values_list("external_id", flat=True))
        created, k = [], 0
        for draft, split in rows:
            k += 1
            while f"gen-{k}" in taken:
                k += 1
            created.append(Scenario.objects.create(
                scenario_set=scenario_set, external_id=f"gen-{k}", user_message=draft.user_message,
                reference=draft.reference or "", split=split,
                metadata={"difficulty": draft.difficulty, "generated_from": task[:500],
                          **({"mcp_server": mcp_server_name[:200]} if mcp_server_name else {})}))
    return created
