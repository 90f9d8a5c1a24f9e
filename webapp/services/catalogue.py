"""Writes to the catalogue: agents, scenario sets and scenarios, rubrics and their versions, judge configs."""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from studio.key_policy import normalise_base
from webapp.egress_policy import egress_refusal
from webapp.judge_keys import judge_key_refusal
from webapp.model_catalogue import BaseModelChoiceError, check_base_model_choice
from webapp.models import Agent, JudgeConfig, Project, Role, Rubric, RubricVersion, Scenario, ScenarioSet
from webapp.services.access import require_role
from webapp.services.mcp_servers import mcp_environment_options_clean
from webapp.services.scenario_import import parse_scenario_file
from webapp.services.secrets import secret_encrypt

AGENT_FIELDS = ("name", "base_model", "system_prompt", "environment_kind", "environment_options", "temperature",
                "top_p", "max_tokens")


def _save(obj, *, unique_message: str) -> None:
    """full_clean then save; a race on a unique name becomes the same field error as the check."""
    obj.full_clean()
    try:
        with transaction.atomic():
            obj.save()
    except IntegrityError:
        raise ValidationError({"name": [unique_message]}) from None


def _check_sampling(temperature: float, top_p: float, max_tokens: int) -> None:
    errors = {}
    if not 0.0 <= temperature <= 2.0:
        errors["temperature"] = ["temperature must be between 0 and 2"]
    if not 0.0 < top_p <= 1.0:
        errors["top_p"] = ["top_p must be above 0 and at most 1"]
    if not 1 <= max_tokens <= 32768:
        errors["max_tokens"] = ["max_tokens must be between 1 and 32768"]
    if errors:
        raise ValidationError(errors)


MCP_AGENT_FIELDS = ("mcp_server", "mcp_max_turns", "mcp_answer_tool", "mcp_reward")


def _agent_environment(project: Project, fields: dict[str, Any], current: Agent | None = None) -> dict[str, Any]:
    """The `mcp` environment's choices (server, max turns, answer tool, reward) folded into the options."""
    mcp = {key: fields.pop(key, None) for key in MCP_AGENT_FIELDS}
    kind = fields.get("environment_kind", current.environment_kind if current else "chat")
    options = fields.get("environment_options", current.environment_options if current else {}) or {}
    if kind == "mcp" or "environment_options" in fields:
        fields["environment_options"] = mcp_environment_options_clean(
            project=project, environment_kind=kind, options=options, mcp_server=mcp["mcp_server"],
            max_turns=mcp["mcp_max_turns"], answer_tool=mcp["mcp_answer_tool"], reward=mcp["mcp_reward"])
    if kind == "external" and "environment_options" in fields:
        fields["environment_options"] = _external_options(fields["environment_options"] or {})
    return fields


def _external_options(options: dict[str, Any]) -> dict[str, Any]:
    """An agent in the user's own code: its options checked by the engine's own model (as at launch), stored
    with their defaults filled in so the agent's page shows them."""
    from pydantic import ValidationError as OptionsError

    from training.environments.external import ExternalOptions

    try:
        checked = ExternalOptions.model_validate(options).model_dump(mode="json")
    except OptionsError as err:
        raise ValidationError({"environment_options": [
            f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in err.errors()]}) from None
    ceiling = settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S
    if (checked.get("upstream_timeout_s") or 0) > ceiling:
        raise ValidationError({"environment_options": [
            f"upstream_timeout_s: at most {ceiling:g} s on this deployment (STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S)"]})
    return checked


def _agent_base_model(fields: dict[str, Any], current: Agent | None = None) -> dict[str, Any]:
    """An agent names one of the deployment's models (webapp/model_catalogue.py), never a path: the workers load
    it. An edit that leaves the stored value as it was is not asked to choose again."""
    if "base_model" in fields and not (current is not None and fields["base_model"] == current.base_model):
        try:
            fields["base_model"] = check_base_model_choice(str(fields["base_model"] or ""))
        except BaseModelChoiceError as err:
            raise ValidationError({"base_model": [str(err)]}) from None
    return fields


def agent_create(*, user, project: Project, **fields: Any) -> Agent:
    require_role(user=user, project=project, role=Role.EDITOR)
    fields = _agent_environment(project, _agent_base_model(fields))
    agent = Agent(project=project, **{k: v for k, v in fields.items() if k in AGENT_FIELDS})
    _check_sampling(agent.temperature, agent.top_p, agent.max_tokens)
    _save(agent, unique_message="an agent with this name already exists in the project")
    return agent


def agent_update(*, user, agent: Agent, **fields: Any) -> Agent:
    """An agent a run used becomes a new version (the run keeps its frozen settings); an unused one is edited."""
    require_role(user=user, project=agent.project, role=Role.EDITOR)
    fields = _agent_environment(agent.project, _agent_base_model(fields, current=agent), current=agent)
    changed = False
    for key, value in fields.items():
        if key in AGENT_FIELDS and key != "name" and getattr(agent, key) != value:
            changed = True
        if key in AGENT_FIELDS:
            setattr(agent, key, value)
    if changed and agent.runs.filter(agent_version=agent.version).exists():
        agent.version += 1
    _check_sampling(agent.temperature, agent.top_p, agent.max_tokens)
    _save(agent, unique_message="an agent with this name already exists in the project")
    return agent


def scenario_set_create(*, user, project: Project, name: str, description: str = "") -> ScenarioSet:
    require_role(user=user, project=project, role=Role.EDITOR)
    scenario_set = ScenarioSet(project=project, name=name.strip(), description=description)
    _save(scenario_set, unique_message="a scenario set with this name already exists in the project")
    return scenario_set


def scenario_create(*, user, scenario_set: ScenarioSet, user_message: str, external_id: str = "",
                    context: str = "", reference: str = "", split: str = Scenario.Split.TRAIN,
                    metadata: dict | None = None) -> Scenario:
    require_role(user=user, project=scenario_set.project, role=Role.EDITOR)
    external_id = external_id.strip() or f"s{scenario_set.scenarios.filter(retired=False).count() + 1}"
    if scenario_set.scenarios.filter(external_id=external_id, retired=False).exists():
        raise ValidationError({"external_id": [f"id {external_id!r} is already used in this set"]})
    scenario = Scenario(scenario_set=scenario_set, external_id=external_id, user_message=user_message,
                        context=context, reference=reference, split=split, metadata=metadata or {})
    scenario.full_clean()
    scenario.save()
    return scenario


def scenario_runs(*, scenario: Scenario) -> list[str]:
    """Names of the runs launched with this version of the scenario (each froze its id and text at launch)."""
    frozen = (scenario.external_id, scenario.user_message, scenario.context or None, scenario.reference or None)
    runs = scenario.scenario_set.runs.only("name", "config")
    return [r.name for r in runs if any((x.get("id"), x.get("user_message"), x.get("context"), x.get("reference"))
                                        == frozen for x in r.config.get("scenarios") or [])]


def scenario_update(*, user, scenario: Scenario, user_message: str, context: str = "", reference: str = "",
                    split: str = Scenario.Split.TRAIN, external_id: str = "", metadata: dict | None = None) -> Scenario:
    """Edits a scenario no run has used yet; a used one gets a new version (same id) and is itself kept, retired,
    as the runs that used it saw it. Returns the current version."""
    require_role(user=user, project=scenario.scenario_set.project, role=Role.EDITOR)
    if scenario.retired:
        raise ValidationError("this is an old version of the scenario: edit the current one")
    external_id = external_id.strip() or scenario.external_id
    if scenario.scenario_set.scenarios.filter(external_id=external_id, retired=False).exclude(pk=scenario.pk).exists():
        raise ValidationError({"external_id": [f"id {external_id!r} is already used in this set"]})
    used = bool(scenario_runs(scenario=scenario))
    if used and external_id != scenario.external_id:
        raise ValidationError({"external_id": ["runs used this id: keep it (the new version keeps the id)"]})
    with transaction.atomic():
        if used:
            Scenario.objects.filter(pk=scenario.pk).update(retired=True)
            scenario = Scenario(scenario_set=scenario.scenario_set, version=scenario.version + 1,
                                metadata=scenario.metadata)
        scenario.external_id, scenario.user_message, scenario.context = external_id, user_message, context
        scenario.reference, scenario.split = reference, split
        if metadata is not None:
            scenario.metadata = metadata
        scenario.full_clean()
        scenario.save()
    return scenario


def scenario_delete(*, user, scenario: Scenario) -> None:
    """Deletes a scenario no run has used yet; a used one is retired (no new run gets it; the old runs keep it)."""
    require_role(user=user, project=scenario.scenario_set.project, role=Role.EDITOR)
    if scenario_runs(scenario=scenario):
        Scenario.objects.filter(pk=scenario.pk).update(retired=True)
    else:
        scenario.delete()


def scenario_set_import(*, user, scenario_set: ScenarioSet, file_name: str, data: bytes) -> list[Scenario]:
    """Imports every row of a CSV/JSONL file or none; errors name each bad row (ValidationError on `file`)."""
    require_role(user=user, project=scenario_set.project, role=Role.EDITOR)
    parsed = parse_scenario_file(name=file_name, data=data)
    errors = list(parsed.errors)
    if not errors:
        taken = set(scenario_set.scenarios.filter(retired=False, external_id__in=[r.external_id for r in parsed.rows])
                    .values_list("external_id", flat=True))
        errors = [f"id {r.external_id!r} already exists in this set" for r in parsed.rows if r.external_id in taken]
    if errors:
        raise ValidationError({"file": errors})
    with transaction.atomic():
        return Scenario.objects.bulk_create(
            Scenario(scenario_set=scenario_set, external_id=r.external_id, user_message=r.user_message,
                     context=r.context, reference=r.reference, split=r.split, metadata=r.metadata)
            for r in parsed.rows
        )


def _clean_criteria(criteria: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    cleaned, problems, names = [], [], set()
    for number, item in enumerate(criteria or [], start=1):
        name = str(item.get("name", "")).strip()
        description = str(item.get("description", "")).strip()
        try:
            weight = float(item.get("weight", 1.0))
        except (TypeError, ValueError):
            problems.append(f"criterion {number}: weight must be a number")
            continue
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,49}", name):
            problems.append(f"criterion {number}: name must be a short identifier (letters, digits, _)")
        elif name in names:
            problems.append(f"criterion {number}: name {name!r} repeats")
        if not 0 < weight <= 100:
            problems.append(f"criterion {number}: weight must be above 0 and at most 100")
        if len(description) > 2000:
            problems.append(f"criterion {number}: description is longer than 2000 characters")
        names.add(name)
        cleaned.append({"name": name, "description": description, "weight": weight})
    if problems:
        raise ValidationError({"criteria": problems})
    return cleaned


@transaction.atomic
def rubric_create(*, user, project: Project, name: str, text: str,
                  criteria: list[dict[str, Any]] | None = None) -> Rubric:
    require_role(user=user, project=project, role=Role.EDITOR)
    rubric = Rubric(project=project, name=name.strip())
    _save(rubric, unique_message="a rubric with this name already exists in the project")
    rubric_version_create(user=user, rubric=rubric, text=text, criteria=criteria)
    return rubric


@transaction.atomic
def rubric_version_create(*, user, rubric: Rubric, text: str,
                          criteria: list[dict[str, Any]] | None = None) -> RubricVersion:
    require_role(user=user, project=rubric.project, role=Role.EDITOR)
    # Lock the rubric so two editors saving at once get consecutive numbers, not a unique-constraint error.
    Rubric.objects.select_for_update().filter(pk=rubric.pk).first()
    last = rubric.versions.order_by("-number").values_list("number", flat=True).first() or 0
    version = RubricVersion(rubric=rubric, number=last + 1, text=text.strip(), criteria=_clean_criteria(criteria),
                            created_by=user if getattr(user, "is_authenticated", False) else None)
    if not version.text:
        raise ValidationError({"text": ["the rubric text is empty"]})
    version.full_clean()
    version.save()
    return version


def judge_key_destination(*, model: str, api_base: str | None) -> tuple[str, str]:
    """Where a judge's stored key is sent: the model's provider (litellm's `provider/` prefix) and the API base."""
    provider = model.split("/", 1)[0].strip().lower() if "/" in (model or "") else ""
    return provider, normalise_base(api_base).lower()


def _apply_judge_fields(judge: JudgeConfig, fields: dict[str, Any]) -> None:
    """Sets the fields; `judge.key_dropped` is True when a stored key was removed because its destination (the
    API base or the model's provider) changed and the same request gave no key again: secrets follow their
    destination, never sent where nobody typed them."""
    destination = judge_key_destination(model=judge.model, api_base=judge.api_base) if judge.pk else None
    judge.key_dropped = False  # type: ignore[attr-defined]
    for key in ("name", "model", "api_base", "api_key_env", "temperature", "passes", "concurrency", "budget_usd"):
        if key in fields:
            setattr(judge, key, fields[key])
    if judge.budget_usd is not None:
        judge.budget_usd = Decimal(str(judge.budget_usd))
    errors = {}
    if refusal := judge_key_refusal(api_key_env=judge.api_key_env, api_base=judge.api_base):
        errors["api_key_env"] = [refusal]
    if refusal := egress_refusal(judge.api_base):  # the judge's (or teacher's) requests go there
        errors["api_base"] = [refusal]
    if not 0.0 <= judge.temperature <= 2.0:
        errors["temperature"] = ["temperature must be between 0 and 2"]
    if not 1 <= judge.passes <= 10:
        errors["passes"] = ["passes must be between 1 and 10"]
    if not 1 <= judge.concurrency <= 64:
        errors["concurrency"] = ["concurrency must be between 1 and 64"]
    if errors:
        raise ValidationError(errors)
    api_key = fields.get("api_key")
    if (judge.api_key_encrypted and not api_key and destination is not None
            and judge_key_destination(model=judge.model, api_base=judge.api_base) != destination):
        judge.api_key_encrypted = ""
        judge.key_dropped = True  # type: ignore[attr-defined]
    if api_key:
        judge.api_key_encrypted = secret_encrypt(plaintext=api_key)
    if fields.get("clear_api_key"):
        judge.api_key_encrypted = ""


def judge_config_create(*, user, project: Project, **fields: Any) -> JudgeConfig:
    """`api_key` (optional) is encrypted before it touches the database and is never returned."""
    require_role(user=user, project=project, role=Role.EDITOR)
    judge = JudgeConfig(project=project)
    _apply_judge_fields(judge, fields)
    _save(judge, unique_message="a judge with this name already exists in the project")
    return judge


def judge_config_update(*, user, judge: JudgeConfig, **fields: Any) -> JudgeConfig:
    """A blank `api_key` keeps the stored one (the form never shows it back) while the API base and the model's
    provider stay; changing either drops it unless the request gives one again (`judge.key_dropped`);
    `clear_api_key` removes it."""
    require_role(user=user, project=judge.project, role=Role.EDITOR)
    _apply_judge_fields(judge, fields)
    _save(judge, unique_message="a judge with this name already exists in the project")
    return judge
