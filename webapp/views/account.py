"""The user's own settings: their API token (create, see, revoke)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

from webapp.services.api_tokens import api_token_create, api_token_revoke


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "create":
            api_token_create(user=request.user)
            messages.success(request, "A new API token was created; any earlier one no longer works.")
        elif action == "revoke":
            revoked = api_token_revoke(user=request.user)
            messages.success(request, "Your API token was revoked." if revoked else "You had no API token.")
        else:
            return HttpResponse("Unknown action: choose Create or Revoke.", status=400, content_type="text/plain")
        return redirect("api-token")
    token = Token.objects.filter(user=request.user).first()
    return render(request, "webapp/api_token.html", {"token": token})
