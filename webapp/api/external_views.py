"""The external-rollouts API (issue 21): the step to roll out, group submission, and the run's OpenAI-compatible
endpoint. Authenticated by a project token (`Bearer rs_...`), a user's own token or the session; the run is
looked up for an editor of its project (selectors/external.py), and every write is a service."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import MethodNotAllowed, NotAuthenticated, ParseError, Throttled, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api import external_serializers as s
from webapp.api.auth import EXTERNAL_AUTHENTICATION, BearerAuthentication
from webapp.api.errors import exception_handler
from webapp.api.parsers import BoundedJSONParser
from webapp.input_rules import json_loads_bounded
from webapp.models import Run
from webapp.ratelimit import ExternalThrottle
from webapp.selectors.external import external_run_get, rollouts_state
from webapp.services import external as external_services
from webapp.services import external_proxy
from webapp.services.external import TooLarge

REFUSALS = {
    409: "The step is not open, the group (or a trajectory id) was submitted already, or a turn was sampled with "
         "another step's adapter.",
    413: "The body is over STUDIO_EXTERNAL_MAX_BYTES, or it has more trajectories than the group size or more "
         "messages than STUDIO_EXTERNAL_MAX_MESSAGES.",
    422: "An assistant turn that the model never sampled for that trajectory (the run does not allow them).",
}


def _body(request: HttpRequest | Request) -> bytes:
    """The raw body, refused (413) over the limit before it is parsed."""
    limit = settings.STUDIO_EXTERNAL_MAX_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise TooLarge(f"the body is {length:,} bytes; the limit is {limit:,} (STUDIO_EXTERNAL_MAX_BYTES)")
    try:
        body = request.body
    except (RequestDataTooBig, RawPostDataException):
        raise TooLarge(f"the body is over the limit of {limit:,} bytes (STUDIO_EXTERNAL_MAX_BYTES)") from None
    if len(body) > limit:
        raise TooLarge(f"the body is {len(body):,} bytes; the limit is {limit:,} (STUDIO_EXTERNAL_MAX_BYTES)")
    return body


class _ExternalView(APIView):
    authentication_classes = EXTERNAL_AUTHENTICATION

    def run(self, request: Request, pk: int) -> Run:
        run = external_run_get(user=request.user, token=request.auth, run_id=pk)
        if client_id := request.headers.get("X-Client-Id"):
            external_services.external_client_seen(run=run, client_id=client_id)
        return run


class RolloutsView(_ExternalView):
    @extend_schema(operation_id="runs_rollouts_retrieve", responses=s.RolloutsStateSerializer,
                   summary="The step the run waits for (external agents)",
                   description="Scenarios to roll out now, with the adapter to sample with and the deadline. "
                               "Editors, or a project token of the run's project (`Authorization: Bearer rs_...`).")
    def get(self, request: Request, pk: int) -> Response:
        run = self.run(request, pk)
        base = request.build_absolute_uri(reverse("api:run-openai-models", args=[run.pk])).removesuffix("/models")
        return Response(s.RolloutsStateSerializer(rollouts_state(run=run, openai_base_url=base)).data)


class RolloutGroupsView(_ExternalView):
    parser_classes = [BoundedJSONParser]

    @extend_schema(operation_id="runs_rollouts_groups_create", request=s.GroupSubmissionSerializer,
                   responses={201: s.GroupSubmittedSerializer,
                              **{code: OpenApiResponse(description=text) for code, text in REFUSALS.items()}},
                   summary="Submit a group (external agents)",
                   description="Trajectories are built from the calls recorded for their ids through the run's "
                               "endpoint: the tokens that train are the ones the model sampled.")
    def post(self, request: Request, pk: int) -> Response:
        run = self.run(request, pk)
        _body(request)
        body = s.GroupSubmissionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        group = external_services.external_group_submit(user=request.user, token=request.auth, run=run,
                                                        **body.validated_data)
        return Response({"step": group.step, "group_index": group.group_index,
                         "trajectories": len(group.trajectories)}, status=status.HTTP_201_CREATED)


# --- the run's OpenAI-compatible endpoint: asynchronous views (issue 33) ------------------------------------------
# Plain async Django views rather than DRF's (which are synchronous: a call waiting minutes upstream would hold a
# thread and, through it, a database connection). They run the same steps as the DRF views above: authentication
# (project token, user token, or the session with its CSRF check), the run for an editor of its project, the rate
# limit and the client's heartbeat, in one short database step; errors answer in the API's one shape.


def _authorised(request: HttpRequest, pk: int, methods: tuple[str, ...]) -> Run:
    drf_request = Request(request, authenticators=[auth() for auth in EXTERNAL_AUTHENTICATION])
    user = drf_request.user
    if user is None or not user.is_authenticated:
        raise NotAuthenticated()
    if request.method not in methods:  # after authentication, as DRF answers: 401 before 405
        raise MethodNotAllowed(request.method)
    throttle = ExternalThrottle()
    if not throttle.allow_request(drf_request, None):
        raise Throttled(wait=throttle.wait())
    run = external_run_get(user=user, token=drf_request.auth, run_id=pk)
    if client_id := request.headers.get("X-Client-Id"):
        external_services.external_client_seen(run=run, client_id=client_id)
    return run


def _refusal(exc: Exception) -> HttpResponse | None:
    response = exception_handler(exc, {})
    if response is None:
        return None
    answer = JsonResponse(response.data, status=response.status_code)
    for header in ("Retry-After", "WWW-Authenticate", "Allow"):
        if header in response:
            answer[header] = response[header]
    if response.status_code == 401:
        answer["WWW-Authenticate"] = BearerAuthentication.keyword
    if isinstance(exc, external_proxy.TooManyInFlight):
        answer["Retry-After"] = "1"
    return answer


def _answer(upstream: external_proxy.Upstream) -> HttpResponse:
    return HttpResponse(upstream.body, status=upstream.status, content_type=upstream.content_type)


def _chat_body(request: HttpRequest) -> tuple[dict, str | None]:
    try:
        body = json_loads_bounded(_body(request) or b"null", name="body")
    except ValueError as err:
        raise ParseError(f"the body is not JSON: {err}") from None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise ValidationError({"messages": ["send a chat completion request: a JSON object with `messages`"]})
    key = request.headers.get("X-Trajectory-Id") or None
    if key is not None:
        external_services.external_id_check(value=key, field="X-Trajectory-Id")
    return body, key


def _chat_admitted(request: HttpRequest, pk: int) -> tuple[Run, Any]:
    """One database step before the call waits: who asks, for which run, and what the call may do."""
    run = _authorised(request, pk, ("POST",))
    body, key = _chat_body(request)
    return run, external_proxy.external_chat_prepare(run=run, body=body, trajectory_key=key)


@csrf_exempt  # the session's CSRF check is DRF's SessionAuthentication, in _authorised
async def openai_chat_completions(request: HttpRequest, pk: int) -> HttpResponse:
    """`POST /api/runs/<id>/openai/v1/chat/completions` (OpenAI's API; not in the schema)."""
    try:
        run, call = await external_proxy.in_db(_chat_admitted, request, pk)
        return _answer(await external_proxy.external_chat_serve(run=run, call=call))
    except Exception as exc:  # noqa: BLE001 - the API's refusals; anything else is re-raised below
        if (answer := _refusal(exc)) is None:
            raise
        return answer


@csrf_exempt
async def openai_models(request: HttpRequest, pk: int) -> HttpResponse:
    """`GET /api/runs/<id>/openai/v1/models`."""
    try:
        run = await external_proxy.in_db(_authorised, request, pk, ("GET", "HEAD"))
        return _answer(await external_proxy.external_models(run=run))
    except Exception as exc:  # noqa: BLE001
        if (answer := _refusal(exc)) is None:
            raise
        return answer
