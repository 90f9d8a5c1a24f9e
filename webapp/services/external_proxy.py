"""A run's OpenAI-compatible endpoint: forwards chat completions to the run's inference server (the `base_url`
of its newest `rollouts_wanted` event, kept on the run) and records the ones made for a trajectory. The server is always asked
for log-probs and token ids, so a recorded answer trains on the tokens it sampled; a client that did not ask for
them gets an ordinary answer, and `stream: true` is answered as a stream of the whole completion."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from training.external import sse_chunks
from webapp.models import Run
from webapp.models.runs import ACTIVE_STATUSES
from webapp.selectors.external import rollouts_wanted_latest
from webapp.services.external import NotServing, external_call_record


@dataclass
class Upstream:
    status: int
    body: bytes
    content_type: str


def _base_url(run: Run) -> tuple[str, str]:
    """(base URL, current adapter) of the run's server; NotServing (409) when the run serves nothing now."""
    wanted = rollouts_wanted_latest(run=run) if run.status in ACTIVE_STATUSES else None
    if wanted is None or not run.external_base_url:
        raise NotServing(f"run {run.pk} is not serving ({run.get_status_display().lower()}): its endpoint answers "
                         "once the run has asked for its first step's groups, until it ends")
    return run.external_base_url.rstrip("/"), str(wanted.payload.get("model") or "")


def _unreachable(err: Exception) -> Upstream:
    return Upstream(502, json.dumps({"detail": f"the run's inference server did not answer: {err}"}).encode(),
                    "application/json")


def stored_order(value: Any) -> Any:
    """JSON with its object keys in the order PostgreSQL's jsonb gives them back (shorter keys first, then
    bytewise). The server is sent the request in this order, so that a chat template rendering tools with
    `tojson` samples from exactly the prompt the trainer renders from the recorded call (which the database
    hands back reordered); otherwise the trained tokens would follow a prompt the model never saw."""
    if isinstance(value, dict):
        return {k: stored_order(value[k]) for k in sorted(value, key=lambda k: (len(k.encode()), k.encode()))}
    if isinstance(value, list):
        return [stored_order(v) for v in value]
    return value


def external_models(*, run: Run) -> Upstream:
    base_url, _ = _base_url(run)
    try:
        response = httpx.get(f"{base_url}/models", timeout=settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S)
    except httpx.HTTPError as err:
        return _unreachable(err)
    return Upstream(response.status_code, response.content,
                    response.headers.get("content-type", "application/json"))


def external_chat_completion(*, run: Run, body: dict[str, Any], trajectory_key: str | None) -> Upstream:
    base_url, model = _base_url(run)
    stream = bool(body.get("stream"))
    include_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
    forwarded = {k: stored_order(v) if k in ("messages", "tools") else v
                 for k, v in body.items() if k not in ("stream", "stream_options")}
    forwarded.setdefault("model", model)
    forwarded.update(logprobs=True, return_token_ids=True)
    try:
        response = httpx.post(f"{base_url}/chat/completions", json=forwarded,
                              timeout=settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S)
    except httpx.HTTPError as err:
        return _unreachable(err)
    if response.status_code != 200:  # the server's own error, passed through with its status
        return Upstream(response.status_code, response.content,
                        response.headers.get("content-type", "application/json"))
    try:
        completion = response.json()
    except ValueError as err:
        return _unreachable(ValueError(f"its answer is not JSON ({err})"))
    if trajectory_key:
        external_call_record(run=run, trajectory_key=trajectory_key, request=forwarded, completion=completion)
    for choice in completion.get("choices") or []:  # what the client did not ask for, as a server would answer
        if not body.get("logprobs"):
            choice.pop("logprobs", None)
        if not body.get("return_token_ids"):
            choice.pop("token_ids", None)
    if not body.get("return_token_ids"):
        completion.pop("prompt_token_ids", None)
    if stream:
        return Upstream(200, sse_chunks(completion, include_usage=include_usage), "text/event-stream")
    return Upstream(200, json.dumps(completion).encode(), "application/json")
