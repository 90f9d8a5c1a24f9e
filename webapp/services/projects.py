from __future__ import annotations

from django.db import transaction

from django.core.exceptions import ValidationError

from webapp.live.publish import project_access_changed
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
    transaction.on_commit(lambda: project_access_changed(project.id))
    return membership


def membership_remove(*, project: Project, user, acting_user=None) -> None:
    """Removes a member: their pages, API calls and open live streams of the project's runs stop at once.
    The owner stays (they own the project)."""
    if acting_user is not None:
        require_role(user=acting_user, project=project, role=Role.EDITOR)
    if user.pk == project.owner_id:
        raise ValidationError({"username": ["the project's owner cannot be removed"]})
    if not Membership.objects.filter(project=project, user=user).delete()[0]:
        raise ValidationError({"username": [f"{user.username} is not a member of this project"]})
    transaction.on_commit(lambda: project_access_changed(project.id))
