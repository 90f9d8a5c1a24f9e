from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from webapp.live.publish import project_access_changed
from webapp.models import Membership, Project, Role
from webapp.services.access import require_role


def project_queue_priority_set(*, user, project: Project, priority: int) -> None:
    """The project's queue priority (webapp/queue_policy.py): its owner's choice, within the deployment's bounds.
    Editors who do not own the project are refused: the priority weighs against every other project's runs."""
    from django.core.exceptions import PermissionDenied

    from webapp.queue_policy import priority_check

    if getattr(user, "pk", None) != project.owner_id:
        raise PermissionDenied("only the project's owner sets its queue priority")
    Project.objects.filter(pk=project.pk).update(queue_priority=priority_check(int(priority)))


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


def member_add(*, project: Project, username: str, role: str, acting_user, create: bool = False,
               email: str = "") -> tuple[Membership, str]:
    """Adds an existing user, or with `create` a new account with no password yet. Returns the membership and,
    for a new account, the path of its one-time invite link (where the person sets a password; no mail server
    is assumed: the editor sends the link). Editors of the project only."""
    require_role(user=acting_user, project=project, role=Role.EDITOR)
    username = (username or "").strip()
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    if user is None and not create:
        raise ValidationError({"username": [f"no user named {username!r}: tick “create an account” to invite them"]})
    if user is not None and create:
        raise ValidationError({"username": [f"{username!r} already has an account: untick “create an account”"]})
    invite = ""
    with transaction.atomic():
        if user is None:
            user = User(username=username, email=(email or "").strip())
            user.set_unusable_password()
            user.full_clean(exclude=["password"])
            user.save()
            invite = reverse("invite-accept", args=[urlsafe_base64_encode(force_bytes(user.pk)),
                                                    default_token_generator.make_token(user)])
        membership = membership_set(project=project, user=user, role=role, acting_user=acting_user)
    return membership, invite


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
