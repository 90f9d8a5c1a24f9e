"""New agent from an example (docs/examples.md): the example's agent and a scenario set generated for it, its
held-out scenarios in the validation split (the run's evaluation answers them; training never sees them)."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from training.fixtures.examples import EXAMPLES
from webapp.model_catalogue import base_model_choices, unbuilt_model
from webapp.models import Agent, Project, Role, Scenario, ScenarioSet
from webapp.services.access import require_role
from webapp.services.catalogue import agent_create, scenario_set_create


def _free_name(model, project: Project, title: str) -> str:
    taken = set(model.objects.filter(project=project, name__startswith=title).values_list("name", flat=True))
    return next(name for n in range(1, len(taken) + 2) if (name := title if n == 1 else f"{title} ({n})") not in taken)


def example_base_model(*, example: str) -> str | None:
    """The model an agent from this example gets when none is chosen: the one warmed up for it where this
    deployment offers it, else the deployment's only model; None when neither (a person must choose)."""
    spec = EXAMPLES.get(example)
    offered = [name for name, _ in base_model_choices()]
    if spec is not None and spec.model in offered:
        return spec.model
    return offered[0] if len(offered) == 1 else None


def example_model_notes() -> list[str]:
    """For each example's own model that this deployment lists but has not built yet: the command that builds it
    and the examples that wait for it (their agents name it by default; a run of one is refused until it is built)."""
    notes = []
    for model in dict.fromkeys(e.model for e in EXAMPLES.values() if e.model):
        if (missing := unbuilt_model(model)) is not None:
            titles = ", ".join(e.title for e in EXAMPLES.values() if e.model == model)
            notes.append(f"{missing}. Until then a run of these examples on it cannot launch: {titles}.")
    return notes


def agent_from_example(*, user, project: Project, example: str, base_model: str, scenarios: int,
                       held_out: int) -> tuple[Agent, ScenarioSet]:
    """`base_model` "" takes the example's own model (example_base_model)."""
    require_role(user=user, project=project, role=Role.EDITOR)
    if example not in EXAMPLES:
        raise ValidationError({"example": [f"no example {example!r}; choose one of {', '.join(EXAMPLES)}"]})
    spec = EXAMPLES[example]
    base_model = base_model or example_base_model(example=example) or ""
    if not base_model:
        raise ValidationError({"base_model": [f"this deployment does not offer {spec.title!r}'s warmed-up model "
                                              f"({spec.model or 'none'}): choose a model"]})
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
