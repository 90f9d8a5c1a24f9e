"""Project API tokens: a key that acts as its creator, in one project only (the rollouts API and a run's
OpenAI-compatible endpoint, `Authorization: Bearer rs_...`). Only the key's sha256 is stored."""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from webapp.models import Project, ProjectToken, Role
from webapp.services.access import require_role

KEY_PREFIX = "rs_"
LAST_USED_EVERY_S = 60  # a token in use writes its last-used time at most this often, not on every request


def project_token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def project_token_create(*, user, project: Project, name: str) -> tuple[ProjectToken, str]:
    """(token, key): the key is returned here once and never stored."""
    require_role(user=user, project=project, role=Role.EDITOR)
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["give the token a name, e.g. the machine or script that will use it"]})
    key = KEY_PREFIX + secrets.token_urlsafe(30)  # 40 url-safe characters
    token = ProjectToken.objects.create(project=project, name=name[:100], key_hash=project_token_hash(key),
                                        prefix=key[:8], created_by=user)
    return token, key


def project_token_revoke(*, user, token: ProjectToken) -> ProjectToken:
    """Stops the key at once (the next request with it is a 401); the row stays, for the list."""
    require_role(user=user, project=token.project, role=Role.EDITOR)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def project_token_authenticate(*, key: str) -> ProjectToken | None:
    """The live token with this key (its creator and project loaded), or None for an unknown or revoked key."""
    token = (ProjectToken.objects.select_related("created_by", "project")
             .filter(key_hash=project_token_hash(key), revoked_at__isnull=True).first())
    if token is None or not token.created_by.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(seconds=LAST_USED_EVERY_S):
        ProjectToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
