"""A guided start (issue 48): from the home page or an empty project to a launched run by clicks only.

A person picks an example (training/fixtures/examples.py) and a model of the deployment's catalogue; `guided_start_launch`
creates the project (from the home page), the example's agent and the scenario set generated for it (held-out
ones apart: services/examples.py) and launches a first run with settings made for a first run, scored by the
example's own game or puzzle (no judge to set up). Nothing a person types reaches it but their choices among
rows the page listed.
"""
from __future__ import annotations

from django.db import transaction

from webapp.models import Project, Run
from webapp.services import run_config as defaults
from webapp.services.examples import agent_from_example
from webapp.services.projects import project_create
from webapp.services.runs import run_launch

SCENARIOS = 32  # to train on: enough that a short run sees a new board or position in most groups
HELD_OUT = 8  # kept for the evaluation, which compares the trained agent with the base on what it never saw

def _project_name(user, title: str) -> str:
    taken = set(Project.objects.filter(owner=user, name__startswith=title).values_list("name", flat=True))
    return next(name for n in range(1, len(taken) + 2) if (name := title if n == 1 else f"{title} ({n})") not in taken)


def guided_start_launch(*, user, project: Project | None, example: str, base_model: str,
                        launch_token: str = "") -> Run:
    """The first run of `example` on `base_model` (a catalogue name; "" takes the example's own model), in
    `project`, or in a new project of the user's named after the example when None. A second send of the same
    form (`launch_token`: Back, a double click) returns the first run and creates nothing."""
    from training.fixtures.examples import EXAMPLES

    token = (launch_token or "")[:64]
    if token and (twin := Run.objects.filter(launch_token=token, created_by=user).first()) is not None:
        return twin
    # The launch form's defaults, except what the example's recipe sets (training/fixtures/examples.py).
    recipe = {"steps": defaults.DEFAULT_STEPS, "group_size": defaults.DEFAULT_GROUP_SIZE,
              "groups_per_step": defaults.DEFAULT_GROUPS_PER_STEP, "learning_rate": defaults.DEFAULT_LEARNING_RATE,
              **(EXAMPLES[example].recipe if example in EXAMPLES else {})}
    with transaction.atomic():
        if project is None:
            title = EXAMPLES[example].title if example in EXAMPLES else "First agent"
            project = project_create(owner=user, name=_project_name(user, title),
                                     description="Made by the guided start.")
        agent, scenario_set = agent_from_example(user=user, project=project, example=example, base_model=base_model,
                                                 scenarios=SCENARIOS, held_out=HELD_OUT)
        return run_launch(user=user, project=project, name=f"run-{project.runs.count() + 1}", agent=agent,
                          scenario_set=scenario_set, launch_token=token, **recipe)


def guided_start_blank(*, user, project: Project | None) -> Project:
    """Where a blank agent is written: `project`, or a new project of the user's from the home page."""
    if project is not None:
        return project
    return project_create(owner=user, name=_project_name(user, "My agent"), description="Made by the guided start.")
