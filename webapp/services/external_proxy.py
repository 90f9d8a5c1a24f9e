"""A run's OpenAI-compatible endpoint: forwards chat completions to the run's inference server (the `base_url`
of its newest `rollouts_wanted` event, kept on the run) and records the ones made for a trajectory of an open
group. The server is always asked for log-probs and token ids, so a recorded answer trains on the tokens it
sampled; a client that did not ask for them gets an ordinary answer, and `stream: true` is answered as a stream
of the whole completion.

Asynchronous (issue 33): a call waits on the server for up to its timeout (minutes on a real model), so it must
cost no thread and no database connection while it does. Database work happens in short steps (`in_db`), each
in a thread of the request, at most STUDIO_EXTERNAL_DB_CONCURRENCY at once per process, closing its connection
when done; the wait itself is a coroutine on one pooled httpx.AsyncClient. A run has at most
STUDIO_EXTERNAL_MAX_IN_FLIGHT calls waiting (429 beyond); what is forwarded is an allow-list
(external_request.py)."""
from __future__ import annotations

import asyncio
import functools
import json
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from training.rl.external import group_opening, sse_chunks
from webapp.limits import limit_check
from webapp.models import ExternalGroup, ExternalTrajectory, Run, RunEvent
from webapp.models.runs import ACTIVE_STATUSES
from webapp.operations.counters import ENDPOINT_CALLS_REFUSED
from webapp.selectors.external import rollouts_open_step, rollouts_wanted_latest
from webapp.selectors.usage import recorded_calls_usage
from webapp.services.external import ExternalRefusal, NotServing
from webapp.services.external_calls import external_call_record
from webapp.services.external_checkpoints import checkpoint_served, checkpoint_used
from webapp.services.external_inflight import inflight_acquire, inflight_release
from webapp.services.external_request import ChatRequest, RunLimits, chat_request_checked, stored_order

__all__ = ["ProxyCall", "TooManyInFlight", "Upstream", "answer_shaped", "call_released", "call_slot", "exchange",
           "upstream_http",
           "external_chat_prepare", "external_chat_serve", "external_models", "in_db", "stored_order"]

LOAD_S = 120.0  # beyond the call's own timeout, what loading a checkpoint by name may add to a slot's hold


class TooManyInFlight(ExternalRefusal):
    status = 429


@dataclass
class Upstream:
    status: int
    body: bytes
    content_type: str


# --- the database, in short steps ------------------------------------------------------------------------------

_db_gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _closing(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:  # inside a test's transaction the connection is the test's
                connection.close()

    return run


async def in_db(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in the request's thread for synchronous work (Django's per-request thread under ASGI;
    the caller's own under a test client, whose transaction it then shares), at most
    STUDIO_EXTERNAL_DB_CONCURRENCY at once in this process, its connection closed when it returns: no call holds
    one while it waits upstream, and 200 calls arriving together open a handful, not 200."""
    loop = asyncio.get_running_loop()
    gate = _db_gates.get(loop)
    if gate is None:
        gate = _db_gates[loop] = asyncio.Semaphore(settings.STUDIO_EXTERNAL_DB_CONCURRENCY)
    async with gate:
        return await sync_to_async(_closing(fn), thread_sensitive=True)(*args, **kwargs)


# --- the upstream ----------------------------------------------------------------------------------------------

_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _http() -> httpx.AsyncClient:
    """One pooled client per event loop (daphne has one): a new client per call builds an SSL context and a
    connection each time, tens of milliseconds per request."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=64), timeout=httpx.Timeout(None))
    return client


upstream_http = _http  # serving_proxy.py's calls share the pool


class _TooLarge(Exception):
    pass


def _error(status: int, detail: str) -> Upstream:
    return Upstream(status, json.dumps({"detail": detail}).encode(), "application/json")


def _unreachable(err: Exception) -> Upstream:
    return _error(502, f"the inference server did not answer: {err}")


async def _read(http: httpx.AsyncClient, method: str, url: str, body: dict[str, Any] | None,
                headers: dict[str, str]) -> Upstream:
    """The server's answer, read up to STUDIO_EXTERNAL_MAX_ANSWER_BYTES (_TooLarge beyond: n choices of long
    answers with top log-probs can be hundreds of megabytes, held in this process)."""
    cap = settings.STUDIO_EXTERNAL_MAX_ANSWER_BYTES
    async with http.stream(method, url, json=body, headers=headers) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise _TooLarge(int(declared))
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise _TooLarge(size)
            chunks.append(chunk)
    return Upstream(response.status_code, b"".join(chunks), response.headers.get("content-type", "application/json"))


async def exchange(call: ProxyCall, method: str, url: str, body: dict[str, Any] | None,
                    before: Callable[[], Any] | None = None) -> tuple[Upstream, bool]:
    """(the server's answer, True) within the call's timeout; (an error of our own: 502 / 504, False) otherwise."""
    try:
        async with asyncio.timeout(call.timeout_s):  # not asyncio.wait_for: its 3.11 cancel race (settings.py)
            if before is not None:
                await before()
            return await _read(_http(), method, url, body, call.headers), True
    except TimeoutError:
        return _error(504, f"the inference server did not answer within {call.timeout_s:g} s (the agent's "
                           "upstream_timeout_s, at most STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S)"), False
    except _TooLarge as err:
        return _error(502, f"the inference server answered {err.args[0]:,} bytes or more; the endpoint passes "
                           f"on at most {settings.STUDIO_EXTERNAL_MAX_ANSWER_BYTES:,} "
                           "(STUDIO_EXTERNAL_MAX_ANSWER_BYTES): ask for fewer choices, tokens or top log-probs"), False
    except httpx.HTTPError as err:
        return _unreachable(err), False


# --- what a call may do, decided in one database step -----------------------------------------------------------

@dataclass
class ProxyCall:
    scope: str  # whose in-flight slots it holds: `run:<id>`, or `project-server:<id>` (serving_proxy.py)
    base_url: str
    timeout_s: float
    slot: str | None = None
    request: ChatRequest | None = None
    trajectory_key: str | None = None
    step: int | None = None
    current: str = ""
    checkpoint_path: str = ""
    evicted: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # the deployment's inference token (_upstream_headers)


def _upstream_headers(run: Run) -> dict[str, str]:
    """The deployment's inference token, for a server a worker started (which requires it); never for a run's
    `external` server, whose URL is not the deployment's."""
    if ((run.config or {}).get("server") or {}).get("kind", "local") == "external":
        return {}
    return {"Authorization": f"Bearer {settings.STUDIO_INFERENCE_TOKEN}"}


def _timeout_s(run: Run) -> float:
    """The agent's upstream_timeout_s, within the deployment's maximum."""
    ceiling = settings.STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S
    asked = ((run.config.get("environment") or {}).get("options") or {}).get("upstream_timeout_s")
    return min(float(asked), ceiling) if isinstance(asked, (int, float)) and asked > 0 else ceiling


def _serving(run: Run) -> tuple[str, RunEvent]:
    """(base URL, the newest rollouts_wanted); NotServing (409) when the run serves nothing now."""
    wanted = rollouts_wanted_latest(run=run) if run.status in ACTIVE_STATUSES else None
    if wanted is None or not run.external_base_url:
        raise NotServing(f"run {run.pk} is not serving ({run.get_status_display().lower()}): its endpoint answers "
                         "once the run has asked for its first step's groups, until it ends")
    return run.external_base_url.rstrip("/"), wanted


def call_slot(scope: str, hold_s: float, who: str) -> str:
    """An in-flight slot of `scope`; TooManyInFlight (429) beyond STUDIO_EXTERNAL_MAX_IN_FLIGHT."""
    slot = inflight_acquire(scope=scope, cap=settings.STUDIO_EXTERNAL_MAX_IN_FLIGHT, hold_s=hold_s)
    if slot is None:
        ENDPOINT_CALLS_REFUSED.labels("in_flight").inc()
        raise TooManyInFlight(f"{who} has {settings.STUDIO_EXTERNAL_MAX_IN_FLIGHT} calls waiting on its inference "
                              "server already (STUDIO_EXTERNAL_MAX_IN_FLIGHT): retry when one is answered")
    return slot


def _recorded_step(run: Run, latest: RunEvent, request: ChatRequest, key: str, current: str) -> int:
    """The open step a call tagged with a trajectory id is recorded for; 409 when there is none for it: no step is
    open, the id was submitted already, the call names another adapter, or its messages do not open with the
    run's system prompt and the scenario of a group the step still waits for."""
    wanted = rollouts_open_step(run=run, wanted=latest)
    if wanted is None:
        raise ExternalRefusal("no step is open for groups now: calls are recorded (X-Trajectory-Id) only for an "
                              "open step's groups; leave the header out to sample without recording")
    step = int(wanted.payload["step"])
    if request.checkpoint is not None:
        raise ExternalRefusal(f"a recorded call samples with the step's adapter {current!r}; {request.checkpoint!r} "
                              "is served without X-Trajectory-Id (its answers train nothing)")
    if ExternalTrajectory.objects.filter(run=run, key=key).exists():
        raise ExternalRefusal(f"trajectory id {key} was submitted already: each trajectory needs a new id")
    submitted = set(ExternalGroup.objects.filter(run=run, step=step).values_list("group_index", flat=True))
    system_prompt = str(wanted.payload.get("system_prompt") or "")
    for group in wanted.payload.get("groups") or []:
        opening = group_opening(group.get("scenario") or {}, system_prompt)
        if int(group["group_index"]) not in submitted and request.messages[:len(opening)] == opening:
            return step
    raise ExternalRefusal(f"this call is for no group step {step} waits for: a recorded call begins with the run's "
                          "system prompt and the scenario of an open group (`step.messages(scenario)`), and a "
                          "group submitted already records nothing more")


def _chat_prepared(*, run: Run, body: dict[str, Any], trajectory_key: str | None) -> ProxyCall:
    base_url, latest = _serving(run)
    wanted = latest.payload
    current = str(wanted.get("model") or "")
    sampling = wanted.get("sampling") or run.config.get("sampling") or {}
    asked = body.get("model")
    checkpoint = None
    if isinstance(asked, str) and asked and asked != current:  # an earlier checkpoint, never the engine's next
        checkpoint = run.checkpoints.filter(adapter_name=asked, step_index__lt=int(wanted.get("step") or 0)).first()
    limits = RunLimits(
        model=current, checkpoints=frozenset([asked] if checkpoint is not None else []),
        max_tokens=int(sampling.get("max_tokens") or 64),
        group_size=int(wanted.get("group_size") or (run.config.get("grpo") or {}).get("group_size") or 1),
        temperature=float(sampling.get("temperature", 1.0)), top_p=float(sampling.get("top_p", 1.0)),
        ignore_eos=bool(sampling.get("ignore_eos")), max_messages=settings.STUDIO_EXTERNAL_MAX_MESSAGES)
    request = chat_request_checked(body=body, limits=limits)
    call = ProxyCall(scope=f"run:{run.pk}", base_url=base_url, timeout_s=_timeout_s(run), request=request,
                 trajectory_key=trajectory_key, current=current, headers=_upstream_headers(run))
    if trajectory_key:
        call.step = _recorded_step(run, latest, request, trajectory_key, current)
        # Checked before the call is sent: a call the project has no room to record is never sampled.
        limit_check(limit_name="recorded_calls", usage=recorded_calls_usage(project=run.project), adding=1)
    if checkpoint is not None:
        call.checkpoint_path = checkpoint.path
        call.evicted = checkpoint_used(scope=f"run:{run.pk}", base_url=base_url, name=str(asked), current=current)
    call.slot = call_slot(call.scope, call.timeout_s + LOAD_S, f"run {run.pk}")
    return call


def _models_prepared(*, run: Run) -> ProxyCall:
    base_url, _ = _serving(run)
    call = ProxyCall(scope=f"run:{run.pk}", base_url=base_url, timeout_s=min(_timeout_s(run), 60.0),
                 headers=_upstream_headers(run))
    call.slot = call_slot(call.scope, call.timeout_s, f"run {run.pk}")
    return call


async def call_released(call: ProxyCall) -> None:
    if call.slot is not None:
        await asyncio.shield(sync_to_async(inflight_release, thread_sensitive=False)(scope=call.scope,
                                                                                     slot=call.slot))


# --- the two routes --------------------------------------------------------------------------------------------

MODEL_FIELDS = ("id", "object", "created", "owned_by", "parent", "max_model_len")


async def external_models(*, run: Run) -> Upstream:
    """`GET /models`, as the server lists them, with each model's public fields only (not where its files are)."""
    call = await in_db(_models_prepared, run=run)
    try:
        answer, served = await exchange(call, "GET", f"{call.base_url}/models", None)
    finally:
        await call_released(call)
    if not served or answer.status != 200:
        return answer
    try:
        listed = json.loads(answer.body)
        data = [{k: m[k] for k in MODEL_FIELDS if k in m} for m in listed.get("data") or [] if isinstance(m, dict)]
    except (ValueError, AttributeError):
        return _unreachable(ValueError("its model list is not JSON"))
    return Upstream(200, json.dumps({"object": "list", "data": data}).encode(), "application/json")


def external_chat_prepare(*, run: Run, body: dict[str, Any], trajectory_key: str | None) -> ProxyCall:
    """What the call may do, decided in the caller's database step (synchronous): the request checked against the
    allow-list and the run, its recording admitted, a slot held (release it with external_chat_serve)."""
    return _chat_prepared(run=run, body=body, trajectory_key=trajectory_key)


async def external_chat_serve(*, run: Run, call: ProxyCall) -> Upstream:
    """The prepared call, sent upstream and recorded; its slot released whatever happens."""
    try:
        return await _completion(run, call)
    finally:
        await call_released(call)


async def _completion(run: Run, call: ProxyCall) -> Upstream:
    request = call.request
    assert request is not None

    async def load() -> None:
        await checkpoint_served(http=_http(), base_url=call.base_url, name=str(request.checkpoint),
                                path=call.checkpoint_path, evicted=call.evicted, headers=call.headers)

    answer, served = await exchange(call, "POST", f"{call.base_url}/chat/completions", request.forwarded,
                                     before=load if request.checkpoint else None)
    if not served or answer.status != 200:  # ours, or the server's own error passed through with its status
        return answer
    try:
        completion = json.loads(answer.body)
    except ValueError as err:
        return _unreachable(ValueError(f"its answer is not JSON ({err})"))
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        return _unreachable(ValueError("its answer is not a chat completion"))
    if call.trajectory_key and call.step is not None:
        await in_db(external_call_record, run=run, trajectory_key=call.trajectory_key, step=call.step,
                    messages=request.messages, tools=request.tools, completion=completion)
    return answer_shaped(completion, request)


def answer_shaped(completion: dict[str, Any], request: ChatRequest, model: str | None = None) -> Upstream:
    """The completion as the caller asked for it: log-probs and token ids only when asked, a stream when asked,
    and `model` (when given) the name the caller used."""
    if model is not None:
        completion["model"] = model
    for choice in [c for c in completion["choices"] if isinstance(c, dict)]:  # unasked-for parts left out,
        if not request.logprobs:  # as a server would answer
            choice.pop("logprobs", None)
        if not request.token_ids:
            choice.pop("token_ids", None)
    if not request.token_ids:
        completion.pop("prompt_token_ids", None)
    if request.stream:
        return Upstream(200, sse_chunks(completion, include_usage=request.include_usage), "text/event-stream")
    return Upstream(200, json.dumps(completion).encode(), "application/json")
