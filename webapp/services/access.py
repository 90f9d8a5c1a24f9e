"""Role checks shared by services: a non-member never learns an object exists (404), a member with too small
a role is told so (403)."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404

from webapp.models import Membership, Project, Role
from webapp.wording import with_article


def role_of(*, user, project: Project) -> str | None:
    if not getattr(user, "is_authenticated", False):
        return None
    if project.owner_id == user.id:
        return Role.EDITOR
    membership = Membership.objects.filter(project=project, user=user).only("role").first()
    return membership.role if membership else None


def require_role(*, user, project: Project, role: str) -> str:
    have = role_of(user=user, project=project)
    if have is None:
        raise Http404("no such project")
    if Role.rank(have) < Role.rank(role):
        raise PermissionDenied(f"this needs the {role} role in project {project.name!r}; you are {with_article(have)}")
    return have
