"""Lookups through the user's project membership: a non-member's lookup is a 404, never a leak."""
from __future__ import annotations

from typing import TypeVar

from django.db.models import Count, Model, Q, QuerySet
from django.http import Http404

from webapp.models import Checkpoint, Membership, Project, Role, Run, Trajectory, TrajectoryGroup
from webapp.services.access import require_role, role_of

M = TypeVar("M", bound=Model)


def projects_for_user(*, user) -> QuerySet[Project]:
    if not getattr(user, "is_authenticated", False):
        return Project.objects.none()
    return (Project.objects.filter(Q(owner=user) | Q(memberships__user=user)).distinct()
            .annotate(run_count=Count("runs", distinct=True)))


def project_get(*, user, project_id: int, role: str = Role.VIEWER) -> Project:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise Http404("no such project")
    require_role(user=user, project=project, role=role)
    return project


def project_role(*, user, project: Project) -> str | None:
    return role_of(user=user, project=project)


def project_members(*, project: Project) -> list[Membership]:
    """The Members list: the owner first (an editor by ownership, listed even without a membership row), then
    the others by name; the owner's row has `is_owner` set."""
    rows = list(project.memberships.select_related("user").order_by("user__username"))
    owner = next((m for m in rows if m.user_id == project.owner_id), None)
    if owner is None:
        owner = Membership(project=project, user=project.owner, role=Role.EDITOR)
    owner.is_owner = True  # type: ignore[attr-defined]
    return [owner, *(m for m in rows if m is not owner)]


def in_project_get(*, user, model: type[M], pk: int, role: str = Role.VIEWER, path: str = "project") -> M:
    """Any object under a project (`path` is the lookup to its project), checked against the user's role."""
    obj = model.objects.select_related(path).filter(pk=pk).first()
    if obj is None:
        raise Http404("not found")
    project = obj
    for part in path.split("__"):
        project = getattr(project, part)
    require_role(user=user, project=project, role=role)
    return obj


def user_project_ids(*, user) -> QuerySet:
    return projects_for_user(user=user).values("id")


def for_user(*, user, queryset: QuerySet[M], path: str = "project") -> QuerySet[M]:
    """Restricts a queryset to objects in projects the user belongs to (API list endpoints)."""
    return queryset.filter(**{f"{path}__in": Project.objects.filter(
        Q(owner=user) | Q(memberships__user=user)).values("id")})


def run_get(*, user, run_id: int, role: str = Role.VIEWER) -> Run:
    run = (Run.objects.select_related("project", "agent", "scenario_set", "rubric_version__rubric", "judge_config",
                                      "dataset_version__dataset")
           .filter(pk=run_id).first())
    if run is None:
        raise Http404("no such run")
    require_role(user=user, project=run.project, role=role)
    return run


def run_visible(*, user, run_id: int) -> bool:
    try:
        run_get(user=user, run_id=run_id)
    except Http404:
        return False
    return True


def run_project_id(*, run_id: int) -> int | None:
    return Run.objects.filter(pk=run_id).values_list("project_id", flat=True).first()


def group_get(*, user, group_id: int, role: str = Role.VIEWER) -> TrajectoryGroup:
    group = in_project_get(user=user, model=TrajectoryGroup, pk=group_id, path="run__project", role=role)
    return group


def trajectory_get(*, user, trajectory_id: int, role: str = Role.VIEWER) -> Trajectory:
    return in_project_get(user=user, model=Trajectory, pk=trajectory_id, path="group__run__project", role=role)


def checkpoint_get(*, user, checkpoint_id: int) -> Checkpoint:
    return in_project_get(user=user, model=Checkpoint, pk=checkpoint_id, path="run__project")
