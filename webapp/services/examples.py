"""New agent from an example (docs/examples.md): the example's agent and a scenario set generated for it, its
held-out scenarios in the validation split (the run's evaluation answers them; training never sees them)."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from training.examples import EXAMPLES
from webapp.models import Agent, Project, Role, Scenario, ScenarioSet
from webapp.services.access import require_role
from webapp.services.catalogue import agent_create, scenario_set_create


def _free_name(model, project: Project, title: str) -> str:
    taken = set(model.objects.filter(project=project, name__startswith=title).values_list("name", flat=True))
    return next(name for n in range(1, len(taken) + 2) if (name := title if n == 1 else f"{title} ({n})") not in taken)


def agent_from_example(*, user, project: Project, example: str, base_model: str, scenarios: int,
                       held_out: int) -> tuple[Agent, ScenarioSet]:
    require_role(user=user, project=project, role=Role.EDITOR)
    if example not in EXAMPLES:
        raise ValidationError({"example": [f"no example {example!r}; choose one of {', '.join(EXAMPLES)}"]})
    spec = EXAMPLES[example]
    try:
        train, evaluation = spec.scenarios(scenarios, held_out)
    except ValueError as err:
        raise ValidationError({"scenarios": [str(err)]}) from None
    with transaction.atomic():
        agent = agent_create(user=user, project=project, name=_free_name(Agent, project, spec.title),
                             base_model=base_model, system_prompt=spec.system_prompt,
                             environment_kind=spec.environment_kind, environment_options=dict(spec.environment_options),
                             temperature=spec.temperature, top_p=1.0, max_tokens=spec.max_tokens)
        scenario_set = scenario_set_create(user=user, project=project,
                                           name=_free_name(ScenarioSet, project, spec.title),
                                           description=f"Generated for the example {spec.title!r}: {spec.summary}")
        Scenario.objects.bulk_create(
            Scenario(scenario_set=scenario_set, external_id=s.id, user_message=s.user_message,
                     reference=s.reference or "", metadata=s.metadata, split=split)
            for split, part in ((Scenario.Split.TRAIN, train), (Scenario.Split.VALIDATION, evaluation)) for s in part)
    return agent, scenario_set
