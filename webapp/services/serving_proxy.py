"""A checkpoint served after its run (issue 37; docs/use.md): `…/api/checkpoints/<id>/openai/v1` and
`…/api/projects/<id>/openai/v1` (with `model: "<run>@<step>"`), OpenAI-compatible, answered by the project's
on-demand inference server (serving.py), which is started when it is down.

One code path with the run's endpoint (external_proxy.py, external_request.py): the same parameter allow-list and
limits (the run's max_tokens and group size as n, STUDIO_EXTERNAL_MAX_MESSAGES, the in-flight cap per server, the
answer cap, the upstream timeout), the same asynchronous wait holding no database connection. What differs:
nothing is recorded for training (X-Trajectory-Id is refused), the caller may choose temperature and top_p within
their ranges, and the checkpoint is found among the project's own rows, never from a path.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from webapp.models import Checkpoint, Project, ProjectServer
from webapp.services.checkpoint_retention import checkpoints_mark_served
from webapp.services.external import ExternalRefusal
from webapp.services.external_checkpoints import checkpoint_served, checkpoint_used
from webapp.services.external_proxy import (
    LOAD_S, ProxyCall, Upstream, answer_shaped, call_released, call_slot, exchange, in_db, upstream_http,
)
from webapp.services.external_request import RunLimits, chat_request_checked
from webapp.selectors.serving import project_server_problem
from webapp.services.serving import (
    SERVED_BASE, project_server_request, project_server_touch, served_adapter_name, server_headers,
)

POLL_S = 0.25


class ServerUnavailable(ExternalRefusal):
    status = 503


@dataclass
class ServingCall:
    call: ProxyCall
    server_id: int
    checkpoint: Checkpoint
    served_name: str
    caller_name: str


def serving_checkpoint_find(*, project: Project, checkpoint_id: int | None, model: Any) -> Checkpoint:
    """The project's checkpoint: by id (the checkpoint's endpoint), or by its `<run>@<step>` name (the project's)."""
    if checkpoint_id is not None:
        checkpoint = Checkpoint.objects.select_related("run").filter(pk=checkpoint_id, run__project=project).first()
        if checkpoint is None:
            raise ValidationError({"model": ["no such checkpoint in this project"]})
        return checkpoint
    if not isinstance(model, str) or not model:
        raise ValidationError({"model": ["name the checkpoint: `model: \"<run>@<step>\"` (its name on the run page)"]})
    found = list(Checkpoint.objects.select_related("run").filter(run__project=project, adapter_name=model)[:5])
    if not found:
        raise ValidationError({"model": [f"this project has no checkpoint named {model!r}"]})
    if len(found) > 1:
        ids = ", ".join(str(c.pk) for c in found)
        raise ValidationError({"model": [f"several runs of this project have a checkpoint named {model!r} (ids {ids}): "
                                         "use /api/checkpoints/<id>/openai/v1 for the one you mean"]})
    return found[0]


def serving_chat_prepare(*, project: Project, checkpoint_id: int | None, body: dict[str, Any],
                         trajectory_key: str | None) -> ServingCall:
    """The caller's database step: the checkpoint, the request checked against the allow-list and the run's limits,
    the project's server asked for (started when it is down), an in-flight slot held."""
    if trajectory_key:
        raise ValidationError({"X-Trajectory-Id": ["a checkpoint served after its run records nothing for training: "
                                                   "leave X-Trajectory-Id out (it is for a run's own endpoint)"]})
    checkpoint = serving_checkpoint_find(project=project, checkpoint_id=checkpoint_id, model=body.get("model"))
    checkpoints_mark_served(checkpoint_ids=[checkpoint.pk])  # kept by the retention policy from now on
    run = checkpoint.run
    sampling = run.config.get("sampling") or {}
    limits = RunLimits(
        model=checkpoint.adapter_name, checkpoints=frozenset(), max_tokens=int(sampling.get("max_tokens") or 64),
        group_size=int((run.config.get("grpo") or {}).get("group_size") or 1),
        temperature=float(sampling.get("temperature", 1.0)), top_p=float(sampling.get("top_p", 1.0)),
        ignore_eos=False, max_messages=settings.STUDIO_EXTERNAL_MAX_MESSAGES, fixed_sampling=False)
    request = chat_request_checked(body=body, limits=limits)
    server, _ = project_server_request(project=project, base_model=str(run.config.get("base_model") or ""))
    timeout_s = settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S
    call = ProxyCall(scope=f"project-server:{server.pk}", base_url="", timeout_s=timeout_s, request=request,
                     headers=server_headers(), checkpoint_path=checkpoint.path)
    call.slot = call_slot(call.scope, timeout_s + LOAD_S + settings.STUDIO_SERVE_START_TIMEOUT_S,
                          f"the inference server of project {project.pk}")
    return ServingCall(call=call, server_id=server.pk, checkpoint=checkpoint,
                       served_name=served_adapter_name(checkpoint), caller_name=checkpoint.adapter_name)


def _server_step(server_id: int, name: str) -> tuple[str, str | None, list[str]]:
    """(status, base URL or why not, adapters to unload) of the server now, marking it (and `name`) used."""
    server = ProjectServer.objects.get(pk=server_id)
    if problem := project_server_problem(server):
        return "failed", problem, []
    if server.status in (ProjectServer.Status.FAILED, ProjectServer.Status.STOPPED):
        return "failed", server.error or server.stop_reason or "stopped", []
    if server.status != ProjectServer.Status.READY:
        return "starting", None, []
    project_server_touch(server_id=server_id)
    evicted = checkpoint_used(scope=f"project-server:{server_id}", base_url=server.base_url, name=name,
                              current=SERVED_BASE)
    return "ready", server.base_url, evicted


async def serving_chat_serve(*, prepared: ServingCall) -> Upstream:
    """Waits for the server (no connection held between short database steps), loads the checkpoint by name,
    forwards the checked request, and answers as the caller asked; the slot is released whatever happens."""
    call = prepared.call
    try:
        deadline = time.monotonic() + settings.STUDIO_SERVE_START_TIMEOUT_S
        while True:
            state, detail, evicted = await in_db(_server_step, prepared.server_id, prepared.served_name)
            if state == "ready":
                break
            if state == "failed" or time.monotonic() > deadline:
                raise ServerUnavailable(f"the project's inference server is not available: "
                                        f"{detail or 'not ready within STUDIO_SERVE_START_TIMEOUT_S'}")
            await asyncio.sleep(POLL_S)
        call.base_url = str(detail)
        request = call.request
        assert request is not None
        forwarded = {**request.forwarded, "model": prepared.served_name}

        async def load() -> None:
            await checkpoint_served(http=upstream_http(), base_url=call.base_url, name=prepared.served_name,
                                    path=call.checkpoint_path, evicted=evicted, headers=call.headers)

        answer, served = await exchange(call, "POST", f"{call.base_url}/chat/completions", forwarded, before=load)
        await in_db(project_server_touch, server_id=prepared.server_id)
    finally:
        await call_released(call)
    if not served or answer.status != 200:
        return answer
    try:
        completion = json.loads(answer.body)
    except ValueError:
        return Upstream(502, json.dumps({"detail": "the inference server's answer is not JSON"}).encode(),
                        "application/json")
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        return Upstream(502, json.dumps({"detail": "the inference server's answer is not a chat completion"}).encode(),
                        "application/json")
    return answer_shaped(completion, request, model=prepared.caller_name)
