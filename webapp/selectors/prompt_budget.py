"""How much of the model's context an agent's prompt takes, for the agent form's warning and the launch check:
the web side of training.model.prompt_budget (the count itself is the engine's, pure). An `mcp` agent's tools are its
server's, as the last "test connection" listed them."""
from __future__ import annotations

from typing import Any

from webapp.model_catalogue import BaseModelChoiceError, resolve_base_model
from webapp.models import Agent, McpServer, Project


def agent_tools(*, project: Project, environment_kind: str, environment_options: dict[str, Any],
                mcp_server_id: int | None) -> tuple[list[dict[str, Any]] | None, bool]:
    """(the tools the model will be given, whether they are known). Unknown: an mcp server never listed."""
    if environment_kind == "mcp":
        server = McpServer.objects.filter(project=project, pk=mcp_server_id).first() if mcp_server_id else None
        return (list(server.tools), True) if server is not None and server.tools_listed_at else (None, False)
    from training.model.prompt_budget import environment_tools

    try:
        return environment_tools(environment_kind, environment_options), True
    except ValueError:  # options the form refuses beside their field anyway
        return None, False


def launch_tools(*, agent: Agent) -> list[dict[str, Any]] | None:
    """What the launch check counts as an agent's tools when its options alone do not say (mcp)."""
    if agent.environment_kind != "mcp":
        return None
    tools, known = agent_tools(project=agent.project, environment_kind="mcp", environment_options={},
                               mcp_server_id=(agent.environment_options or {}).get("mcp_server"))
    return tools if known else None


def _scenarios(scenario_set: Any) -> list[Any]:
    from training.types import Scenario as EngineScenario

    rows = scenario_set.scenarios.filter(retired=False).values_list("external_id", "user_message", "context")
    return [EngineScenario(id=i, user_message=m, context=c or None) for i, m, c in rows]


def agent_prompt_budget(*, project: Project, base_model: str, system_prompt: str, environment_kind: str,
                        environment_options: dict[str, Any], mcp_server_id: int | None,
                        max_tokens: int) -> dict[str, Any]:
    """{"budget": the prompt without a scenario, "error": why it cannot be counted, "tools_known",
    "sets": per scenario set of the project, its longest scenario's budget and whether it fits}."""
    from training.model.preflight import model_counter
    from training.model.prompt_budget import prompt_budget

    tools, known = agent_tools(project=project, environment_kind=environment_kind,
                               environment_options=environment_options, mcp_server_id=mcp_server_id)
    try:  # only the deployment's models are read, never a directory the form was sent
        model = resolve_base_model(base_model)
    except BaseModelChoiceError as err:
        return {"budget": None, "error": str(err), "tools_known": known, "sets": [], "problem": None}
    counter, error = model_counter(model.source)
    if counter is None:
        return {"budget": None, "error": error, "tools_known": known, "sets": [], "problem": None}
    tokenizer, context = counter
    from training.config import ChatConfig

    chat = ChatConfig(family=model.chat_template)  # the catalogue's family, as a run of the agent would render

    def count(scenarios: list[Any]) -> Any:
        return prompt_budget(tokenizer, context=context, system_prompt=system_prompt, tools=tools,
                             scenarios=scenarios, max_tokens=max_tokens, chat=chat)

    budget = count([])
    sets = []
    if environment_kind != "external":  # an external client writes its own prompts
        for scenario_set in project.scenario_sets.order_by("name"):
            if scenarios := _scenarios(scenario_set):
                longest = count(scenarios)
                sets.append({"name": scenario_set.name, "budget": longest, "problem": longest.problem()})
    return {"budget": budget, "error": None, "tools_known": known, "sets": sets, "problem": budget.problem(),
            "mcp_unlisted": environment_kind == "mcp" and not known}
