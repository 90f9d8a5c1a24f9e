"""The external-rollouts API (issue 21): the step to roll out, group submission, and the run's OpenAI-compatible
endpoint. Authenticated by a project token (`Bearer rs_...`), a user's own token or the session; the run is
looked up for an editor of its project (selectors/external.py), and every write is a service."""
from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpResponse
from django.http.request import RawPostDataException
from django.core.exceptions import RequestDataTooBig
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api import external_serializers as s
from webapp.api.auth import EXTERNAL_AUTHENTICATION
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


def _body(request: Request) -> bytes:
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
    parser_classes = [JSONParser]

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


def _answer(upstream: external_proxy.Upstream) -> HttpResponse:
    return HttpResponse(upstream.body, status=upstream.status, content_type=upstream.content_type)


@extend_schema(exclude=True)  # OpenAI's own API, documented on the API docs page and in docs/webapp.md
class OpenAIModelsView(_ExternalView):
    throttle_classes = [ExternalThrottle]

    def get(self, request: Request, pk: int) -> HttpResponse:
        return _answer(external_proxy.external_models(run=self.run(request, pk)))


@extend_schema(exclude=True)
class OpenAIChatView(_ExternalView):
    throttle_classes = [ExternalThrottle]

    def post(self, request: Request, pk: int) -> HttpResponse:
        run = self.run(request, pk)
        try:
            body = json.loads(_body(request) or b"null")
        except ValueError as err:
            raise ParseError(f"the body is not JSON: {err}") from None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise ValidationError({"messages": ["send a chat completion request: a JSON object with `messages`"]})
        key = request.headers.get("X-Trajectory-Id") or None
        if key is not None:
            external_services.external_id_check(value=key, field="X-Trajectory-Id")
        return _answer(external_proxy.external_chat_completion(run=run, body=body, trajectory_key=key))
