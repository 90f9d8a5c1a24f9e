"""Checkpoints served after their run (issue 37): OpenAI-compatible, asynchronous views like the run's endpoint
(external_views.py), answered by the project's on-demand inference server (services/serving_proxy.py).

    /api/checkpoints/<id>/openai/v1/chat/completions   /api/checkpoints/<id>/openai/v1/models
    /api/projects/<id>/openai/v1/chat/completions       /api/projects/<id>/openai/v1/models  (model: "<run>@<step>")

Authenticated by a project token of the checkpoint's project (another project's token is a 404, as for a
checkpoint that does not exist), a user's own token or the session, for an editor of the project (a served answer
spends the project's server time)."""
from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import MethodNotAllowed, NotAuthenticated, ParseError, Throttled, ValidationError
from rest_framework.request import Request

from webapp.api.auth import EXTERNAL_AUTHENTICATION
from webapp.api.external_views import _answer, _body, _refusal
from webapp.input_rules import json_loads_bounded
from webapp.models import Checkpoint, Project, ProjectToken, Role
from webapp.ratelimit import ExternalThrottle
from webapp.services import external_proxy, serving_proxy
from webapp.services.access import require_role


def _project(request: HttpRequest, *, project_id: int | None, checkpoint_id: int | None,
             methods: tuple[str, ...]) -> Project:
    drf_request = Request(request, authenticators=[auth() for auth in EXTERNAL_AUTHENTICATION])
    user = drf_request.user
    if user is None or not user.is_authenticated:
        raise NotAuthenticated()
    if request.method not in methods:
        raise MethodNotAllowed(request.method)
    throttle = ExternalThrottle()
    if not throttle.allow_request(drf_request, None):
        raise Throttled(wait=throttle.wait())
    if checkpoint_id is not None:
        project_id = Checkpoint.objects.filter(pk=checkpoint_id).values_list("run__project_id", flat=True).first()
    project = Project.objects.filter(pk=project_id).first() if project_id is not None else None
    token = drf_request.auth
    # Another project's token is told exactly what a missing checkpoint is told: no oracle of which ids exist.
    if project is None or (isinstance(token, ProjectToken) and token.project_id != project.pk):
        raise Http404("no such checkpoint" if checkpoint_id is not None else "no such project")
    require_role(user=user, project=project, role=Role.EDITOR)
    return project


def _chat_admitted(request: HttpRequest, project_id: int | None, checkpoint_id: int | None):
    project = _project(request, project_id=project_id, checkpoint_id=checkpoint_id, methods=("POST",))
    try:
        body = json_loads_bounded(_body(request) or b"null", name="body")
    except ValueError as err:
        raise ParseError(f"the body is not JSON: {err}") from None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise ValidationError({"messages": ["send a chat completion request: a JSON object with `messages`"]})
    return serving_proxy.serving_chat_prepare(project=project, checkpoint_id=checkpoint_id, body=body,
                                              trajectory_key=request.headers.get("X-Trajectory-Id") or None)


def _models(request: HttpRequest, project_id: int | None, checkpoint_id: int | None) -> dict:
    project = _project(request, project_id=project_id, checkpoint_id=checkpoint_id, methods=("GET", "HEAD"))
    checkpoints = Checkpoint.objects.filter(run__project=project).select_related("run").order_by("run_id", "step_index")
    if checkpoint_id is not None:
        checkpoints = checkpoints.filter(pk=checkpoint_id)
    return {"object": "list", "data": [{"id": c.adapter_name, "object": "model", "owned_by": "rubric-studio",
                                        "created": int(c.created_at.timestamp())} for c in checkpoints[:1000]]}


async def _chat(request: HttpRequest, project_id: int | None, checkpoint_id: int | None) -> HttpResponse:
    try:
        prepared = await external_proxy.in_db(_chat_admitted, request, project_id, checkpoint_id)
        return _answer(await serving_proxy.serving_chat_serve(prepared=prepared))
    except Exception as exc:  # noqa: BLE001 - the API's refusals; anything else is re-raised below
        if (answer := _refusal(exc)) is None:
            raise
        return answer


async def _list(request: HttpRequest, project_id: int | None, checkpoint_id: int | None) -> HttpResponse:
    try:
        return JsonResponse(await external_proxy.in_db(_models, request, project_id, checkpoint_id))
    except Exception as exc:  # noqa: BLE001
        if (answer := _refusal(exc)) is None:
            raise
        return answer


@csrf_exempt  # the session's CSRF check is DRF's SessionAuthentication, in _project
async def checkpoint_chat_completions(request: HttpRequest, pk: int) -> HttpResponse:
    return await _chat(request, None, pk)


@csrf_exempt
async def checkpoint_models(request: HttpRequest, pk: int) -> HttpResponse:
    return await _list(request, None, pk)


@csrf_exempt
async def project_chat_completions(request: HttpRequest, pk: int) -> HttpResponse:
    return await _chat(request, pk, None)


@csrf_exempt
async def project_models(request: HttpRequest, pk: int) -> HttpResponse:
    return await _list(request, pk, None)
