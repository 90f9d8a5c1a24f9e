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


_http: httpx.Client | None = None


def _upstream_client() -> httpx.Client:
    """One pooled client for every forwarded call (thread-safe): a new client per call builds an SSL context and
    a connection each time, tens of milliseconds per request."""
    global _http
    if _http is None:
        _http = httpx.Client(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
    return _http


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


def _serve_checkpoint(run: Run, base_url: str, name: str) -> None:
    """An earlier step's adapter, asked for by its name (`<run>@<step>`): loaded into the run's server from the
    checkpoint the worker wrote, unless it is served already. Any other name goes on to the server, whose own 404
    answers it. Its answers train nothing: a group must be sampled with its step's adapter."""
    checkpoint = run.checkpoints.filter(adapter_name=name).first()
    if checkpoint is None:
        return
    http, timeout = _upstream_client(), settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S
    try:
        listed = http.get(f"{base_url}/models", timeout=timeout)
        if listed.status_code == 200 and name in {m.get("id") for m in listed.json().get("data") or []}:
            return
        http.post(f"{base_url}/load_lora_adapter", json={"lora_name": name, "lora_path": checkpoint.path},
                  timeout=timeout)
    except (httpx.HTTPError, ValueError, AttributeError):
        return  # the forwarded request says what is wrong


def external_models(*, run: Run) -> Upstream:
    base_url, _ = _base_url(run)
    try:
        response = _upstream_client().get(f"{base_url}/models", timeout=settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S)
    except httpx.HTTPError as err:
        return _unreachable(err)
    return Upstream(response.status_code, response.content,
                    response.headers.get("content-type", "application/json"))


def external_chat_completion(*, run: Run, body: dict[str, Any], trajectory_key: str | None) -> Upstream:
    base_url, model = _base_url(run)
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and bool(options.get("include_usage"))
    forwarded = {k: stored_order(v) if k in ("messages", "tools") else v
                 for k, v in body.items() if k not in ("stream", "stream_options")}
    forwarded.setdefault("model", model)
    if forwarded["model"] != model:
        _serve_checkpoint(run, base_url, str(forwarded["model"]))
    forwarded.update(logprobs=True, return_token_ids=True)
    # The trainer scores the sampled tokens at the run's temperature: a sample drawn at another one would train
    # with the wrong log-probs. Left out, it is the run's; a different one is refused.
    temperature = float((run.config.get("sampling") or {}).get("temperature", 1.0))
    if forwarded.get("temperature") is None:
        forwarded["temperature"] = temperature
    elif not isinstance(forwarded["temperature"], (int, float)) or abs(forwarded["temperature"] - temperature) > 1e-6:
        return Upstream(400, json.dumps({"detail": f"this run samples at temperature {temperature:g} (its "
                                         f"sampling.temperature, which training assumes): leave `temperature` "
                                         f"out or send {temperature:g}"}).encode(), "application/json")
    try:
        response = _upstream_client().post(f"{base_url}/chat/completions", json=forwarded,
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
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        return _unreachable(ValueError("its answer is not a chat completion"))
    if trajectory_key:
        external_call_record(run=run, trajectory_key=trajectory_key, request=forwarded, completion=completion)
    for choice in [c for c in completion["choices"] if isinstance(c, dict)]:  # unasked-for parts left out,
        if not body.get("logprobs"):  # as a server would answer
            choice.pop("logprobs", None)
        if not body.get("return_token_ids"):
            choice.pop("token_ids", None)
    if not body.get("return_token_ids"):
        completion.pop("prompt_token_ids", None)
    if stream:
        return Upstream(200, sse_chunks(completion, include_usage=include_usage), "text/event-stream")
    return Upstream(200, json.dumps(completion).encode(), "application/json")
