"""`Authorization: Bearer <key>` for the external-rollouts endpoints: a project token (`rs_...`) acts as its
creator, restricted to its project (the views answer 403 for another project's run); any other bearer key is
tried as the user's own API token, so an OpenAI client given a user token as its api_key works too."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from webapp.services.project_tokens import KEY_PREFIX, project_token_authenticate


class BearerAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Invalid bearer header: send `Authorization: Bearer <key>`.")
        try:
            key = parts[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid bearer key.") from None
        if key.startswith(KEY_PREFIX):
            token = project_token_authenticate(key=key)
            if token is None:
                raise exceptions.AuthenticationFailed("Unknown or revoked project token.")
            return token.created_by, token
        user_token = Token.objects.select_related("user").filter(key=key).first()
        if user_token is None or not user_token.user.is_active:
            raise exceptions.AuthenticationFailed("Unknown or revoked token.")
        return user_token.user, user_token

    def authenticate_header(self, request) -> str:
        return self.keyword


# The external-rollouts endpoints: a project token, a user's own token, or the browser's session.
EXTERNAL_AUTHENTICATION = [BearerAuthentication, authentication.TokenAuthentication,
                           authentication.SessionAuthentication]


class BearerScheme(OpenApiAuthenticationExtension):
    """The schema's name for the bearer key (drf-spectacular finds extensions by their target class)."""

    target_class = BearerAuthentication
    name = "projectToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A project token (`rs_...`, made on the "
                "project's tokens page) or your own API token."}
