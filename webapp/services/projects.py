from __future__ import annotations

from django.db import transaction

from webapp.models import Membership, Project, Role
from webapp.services.access import require_role


@transaction.atomic
def project_create(*, owner, name: str, description: str = "") -> Project:
    project = Project(owner=owner, name=name.strip(), description=description)
    project.full_clean()
    project.save()
    Membership.objects.create(project=project, user=owner, role=Role.EDITOR)
    return project


def membership_set(*, project: Project, user, role: str, acting_user=None) -> Membership:
    """Adds a member or changes their role. `acting_user` None means a trusted caller (command, test setup)."""
    if acting_user is not None:
        require_role(user=acting_user, project=project, role=Role.EDITOR)
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": Role(role)})
    return membership
