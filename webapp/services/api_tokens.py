"""A user's API token (DRF's Token: one per user, sent as `Authorization: Token <key>`)."""
from __future__ import annotations

from django.db import transaction
from rest_framework.authtoken.models import Token


@transaction.atomic
def api_token_create(*, user) -> Token:
    """A new token for `user`; an earlier one stops working at once (a new key is how a leaked one is replaced)."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)


def api_token_revoke(*, user) -> bool:
    """Deletes `user`'s token; False when there was none."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return bool(deleted)
