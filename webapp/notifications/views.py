"""The project's Notifications page: every member sets what they are told; editors add and delete webhooks (a new
webhook's signing secret is shown once, on the answer to the form). Every member sees the webhooks' hosts and
whether they fail, never their full addresses (a Slack address is itself a credential)."""
from __future__ import annotations

from urllib.parse import urlsplit

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from webapp.forms import apply_service_errors
from webapp.limits import LimitExceeded
from webapp.models import NotificationPreference, NotifyEvent, Project, Role, Webhook, WebhookFormat
from webapp.notifications.events import NOTIFY_DEFAULTS
from webapp.notifications.services import notification_preference_set, webhook_create, webhook_delete
from webapp.selectors import access


class PreferenceForm(forms.Form):
    events = forms.MultipleChoiceField(choices=NotifyEvent.choices, required=False,
                                       widget=forms.CheckboxSelectMultiple, label="Tell me when")
    email = forms.BooleanField(required=False, label="by e-mail (to your account's address)")
    all_runs = forms.BooleanField(required=False, label="for every run of the project, not only the ones I launched")


class WebhookForm(forms.Form):
    url = forms.CharField(max_length=500, label="Address", help_text="http(s); checked against the deployment's "
                                                                     "outbound policy now and at each delivery")
    format = forms.ChoiceField(choices=WebhookFormat.choices)
    events = forms.MultipleChoiceField(choices=NotifyEvent.choices, initial=NotifyEvent.values,
                                       widget=forms.CheckboxSelectMultiple)


def webhook_host(hook: Webhook) -> str:
    return urlsplit(hook.url).hostname or "?"


def _page(request: HttpRequest, project: Project, *, pref_form: PreferenceForm | None = None,
          hook_form: WebhookForm | None = None, new_secret: str | None = None, status: int = 200) -> HttpResponse:
    pref = NotificationPreference.objects.filter(project=project, user=request.user).first()
    initial = NOTIFY_DEFAULTS if pref is None else {"events": pref.events, "email": pref.email,
                                                    "all_runs": pref.all_runs}
    hooks = [{"hook": h, "host": webhook_host(h)} for h in project.webhooks.all()]
    return render(request, "webapp/notifications.html", {
        "project": project, "pref_form": pref_form or PreferenceForm(initial=initial), "has_email": bool(
            request.user.email), "hook_form": hook_form or WebhookForm(), "hooks": hooks, "new_secret": new_secret,
        "can_edit": access.project_role(user=request.user, project=project) == Role.EDITOR,
    }, status=status)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def project_notifications(request: HttpRequest, project_id: int) -> HttpResponse:
    """POST `action=preferences` (any member, their own) or `action=webhook` (editors)."""
    action = request.POST.get("action", "") if request.method == "POST" else None
    role = Role.EDITOR if action == "webhook" else Role.VIEWER
    project = access.project_get(user=request.user, project_id=project_id, role=role)
    if action == "preferences":
        form = PreferenceForm(request.POST)
        if form.is_valid():
            notification_preference_set(user=request.user, project=project, **form.cleaned_data)
            messages.success(request, "Your notification settings are saved.")
            return redirect("project-notifications", project_id=project.id)
        return _page(request, project, pref_form=form, status=400)
    if action == "webhook":
        hook_form = WebhookForm(request.POST)
        status = 400
        if hook_form.is_valid():
            data = hook_form.cleaned_data
            try:
                _, secret = webhook_create(user=request.user, project=project, url=data["url"], fmt=data["format"],
                                           events=data["events"])
                return _page(request, project, new_secret=secret)
            except ValidationError as err:
                apply_service_errors(hook_form, err)
                status = err.status if isinstance(err, LimitExceeded) else 400
        return _page(request, project, hook_form=hook_form, status=status)
    if action is not None:
        return HttpResponse("Unknown action: preferences or webhook.", status=400, content_type="text/plain")
    return _page(request, project)


@login_required
@require_POST
def project_webhook_delete(request: HttpRequest, project_id: int, webhook_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    hook = get_object_or_404(project.webhooks, pk=webhook_id)
    webhook_delete(user=request.user, webhook=hook)
    messages.success(request, f"The webhook to {webhook_host(hook)} is deleted.")
    return redirect("project-notifications", project_id=project.id)


def failing_webhooks(*, project: Project) -> list[dict]:
    """The project page's warning: webhooks whose last delivery failed (a later success clears it)."""
    return [{"hook": h, "host": webhook_host(h)} for h in project.webhooks.exclude(last_error="")]

