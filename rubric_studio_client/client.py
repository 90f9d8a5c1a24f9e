"""`StudioClient` talks to the Rubric Studio web app; `RunHandle` is one external-rollouts run: its step to roll
out, its OpenAI-compatible endpoint (calls tagged with the current trajectory), and group submission.

    async with StudioClient("https://studio.example.com", token="rs_...") as studio:
        run = await studio.run(12)
        while (step := await run.next_step()) is not None:
            for group in step.groups:
                done = []
                for _ in range(step.group_size):
                    async with run.trajectory() as t:
                        await run.openai.chat.completions.create(messages=step.messages(group.scenario),
                                                                 **step.completion_args())
                    done.append(t)
                await run.submit_group(step, group.group_index, done)
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any
from uuid import uuid4

import httpx
import openai

from rubric_studio_client.errors import (
    RateLimited, ServerError, StepClosed, StudioError, Unreachable, error_for,
)
from rubric_studio_client.state import GroupState, RunState, Step, Submitted, Trajectory

log = logging.getLogger("rubric_studio_client")

TRAJECTORY_HEADER = "X-Trajectory-Id"
CLIENT_HEADER = "X-Client-Id"
_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# The trajectory whose calls are being made in this task (and the tasks it starts): set by RunHandle.trajectory().
_current: contextvars.ContextVar[Trajectory | None] = contextvars.ContextVar("rubric_studio_trajectory", default=None)
# How long a GET keeps retrying while the web app is unreachable, restarting (5xx) or rate limiting (429).
RETRY_FOR_S = 60.0

Rollout = Callable[["RunHandle", Step, dict[str, Any]], Awaitable[Any]]


class RolloutFailed(Exception):
    """Every rollout of a group raised; the first exception is the cause."""


def current_trajectory() -> Trajectory | None:
    """The trajectory of the enclosing `RunHandle.trajectory()` context, or None outside one."""
    return _current.get()


def default_client_id() -> str:
    """This process, as the run page lists it among connected clients: host name and process id."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:48] or "client"
    return f"{name}-{os.getpid()}"


class StudioClient:
    """A connection to a Rubric Studio web app. `base_url` is the app's address (as in the browser), `token` a
    project API token (`rs_...`, created on the project's Tokens page). `client_id` names this process on the
    run page (default: host name and process id). Use as `async with StudioClient(...) as studio:` or call
    `aclose()`."""

    def __init__(self, base_url: str, token: str, *, client_id: str | None = None, timeout_s: float = 30.0) -> None:
        if not token:
            raise ValueError("a token is required: create one on the project's Tokens page")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.client_id = client_id or default_client_id()
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, headers={
            "Authorization": f"Bearer {token}", CLIENT_HEADER: self.client_id, "Accept": "application/json"})
        self._handles: list[RunHandle] = []

    async def run(self, run_id: int) -> RunHandle:
        """The handle of run `run_id` (the number in the run page's address). Raises `Unauthorized` (401),
        `Forbidden` (403, a token of another project) or `NotFound` (404) right away."""
        state = RunState.from_json(await self.request("GET", f"/api/runs/{int(run_id)}/rollouts/"))
        handle = RunHandle(self, int(run_id), state.openai_base_url or
                           f"{self.base_url}/api/runs/{int(run_id)}/openai/v1")
        self._handles.append(handle)
        return handle

    async def request(self, method: str, path: str, *, json: Any = None) -> Any:
        """One API call; the JSON answer, or the `StudioError` for an error answer. A GET is retried for up to
        RETRY_FOR_S while the app is unreachable, failing (5xx) or rate limiting (429); a POST only after 429
        (the server did not take it)."""
        give_up = time.monotonic() + RETRY_FOR_S
        wait = 0.5
        while True:
            try:
                response = await self._http.request(method, path, json=json)
                if response.is_success:
                    return response.json() if response.content else None
                raise error_for(response.status_code, _body(response), retry_after=response.headers.get("Retry-After"))
            except (httpx.TransportError, StudioError) as exc:
                err = exc if isinstance(exc, StudioError) else Unreachable(0, f"{type(exc).__name__}: {exc}")
                retry = isinstance(err, RateLimited) or (method == "GET" and isinstance(err, (ServerError, Unreachable)))
                if not retry or time.monotonic() + wait > give_up:
                    raise err from (exc if exc is not err else None)
                pause = err.retry_after_s if isinstance(err, RateLimited) and err.retry_after_s else wait
                log.info("%s %s: %s; retrying in %.1f s", method, path, err, pause)
                await asyncio.sleep(pause)
                wait = min(wait * 2, 8.0)

    async def aclose(self) -> None:
        for handle in self._handles:
            await handle.aclose()
        await self._http.aclose()

    async def __aenter__(self) -> StudioClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RunHandle:
    """One run whose agent rolls out in this process. `openai` is an `openai.AsyncOpenAI` at the run's endpoint;
    inside `async with handle.trajectory():` its calls are recorded for that trajectory."""

    def __init__(self, client: StudioClient, run_id: int, openai_base_url: str) -> None:
        self.run_id = run_id
        self.client_id = client.client_id
        self.token = client.token
        self.openai_base_url = openai_base_url
        self._client = client
        self._submitted: set[tuple[int, int]] = set()
        self._http_clients: list[httpx.AsyncClient] = []
        self.openai = openai.AsyncOpenAI(base_url=openai_base_url, api_key=client.token,
                                         http_client=self.httpx_client())

    # Tagging: any HTTP client from httpx_client() adds the headers, so frameworks that take an httpx client
    # (LangChain's ChatOpenAI: http_async_client=) or an AsyncOpenAI (the Agents SDK) record per trajectory.
    def headers(self) -> dict[str, str]:
        """The headers a call made now should carry: `X-Client-Id`, and `X-Trajectory-Id` inside a
        `trajectory()` context. For clients that take only static headers, call it inside the context."""
        tagged = {CLIENT_HEADER: self.client_id}
        if (trajectory := _current.get()) is not None:
            tagged[TRAJECTORY_HEADER] = trajectory.id
        return tagged

    def httpx_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """A new `httpx.AsyncClient` (openai's defaults; `kwargs` as httpx takes them) that adds `headers()` to
        every request as it is sent. Closed with the handle."""
        async def tag(request: httpx.Request) -> None:
            request.headers.update(self.headers())

        hooks = dict(kwargs.pop("event_hooks", None) or {})
        hooks["request"] = [tag, *hooks.get("request", [])]
        http = openai.DefaultAsyncHttpxClient(event_hooks=hooks, **kwargs)
        self._http_clients.append(http)
        return http

    @asynccontextmanager
    async def trajectory(self, id: str | None = None) -> AsyncIterator[Trajectory]:
        """Tags the endpoint calls made inside (in this task and tasks it starts) with one trajectory id (new
        unless given). Yields the `Trajectory`: pass it (or its `id`) to `submit_group`."""
        if id is not None and not _ID.fullmatch(id):
            raise ValueError(f"trajectory id {id!r}: use 1 to 64 letters, digits, '_', '.' or '-'")
        trajectory = Trajectory(id=id or uuid4().hex)
        token = _current.set(trajectory)
        try:
            yield trajectory
        finally:
            _current.reset(token)

    async def state(self) -> RunState:
        """The run now: status, the step waiting for groups (or None), its groups and deadline."""
        return RunState.from_json(await self._client.request("GET", f"/api/runs/{self.run_id}/rollouts/"))

    async def next_step(self, poll_s: float = 1.0, *, timeout_s: float | None = None) -> Step | None:
        """The next step with groups left to roll out, waiting (polling every `poll_s`) while the run is queued,
        paused, awaiting review, training or between steps; None once the run has ended (completed, failed,
        cancelled or crashed). The step's `groups` are those nobody has submitted yet. Raises TimeoutError after
        `timeout_s` (None: wait as long as the run lasts)."""
        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            state = await self.state()
            if state.ended:
                return None
            if state.status == "running" and state.step is not None and state.model:
                groups = tuple(g for g in state.open_groups if (state.step, g.group_index) not in self._submitted)
                if groups:
                    return Step(step=state.step, model=state.model, group_size=int(state.group_size or 1),
                                system_prompt=state.system_prompt, sampling=state.sampling, groups=groups,
                                deadline_s=state.deadline_s, total_steps=state.total_steps)
            if give_up is not None and time.monotonic() >= give_up:
                raise TimeoutError(f"run {self.run_id} asked for no rollouts within {timeout_s} s "
                                   f"(status {state.status}, step {state.step})")
            await asyncio.sleep(poll_s)

    async def submit_group(self, step: Step | int, group_index: int,
                           trajectories: Iterable[Submitted | Trajectory | str | tuple | list]) -> dict[str, Any]:
        """Hands a finished group to the run. Each item is a `Submitted`, a `Trajectory` from `trajectory()`
        (its reward / metadata / messages), a trajectory id, or a tuple `(trajectory_or_id, reward, metadata,
        messages)` (trailing items optional; None for "not given"). Raises `Refused` (`Invalid` 400,
        `TooLarge` 413, `Unsampled` 422) or `StepClosed` (409) with the server's `detail`."""
        number = step.step if isinstance(step, Step) else int(step)
        items = [_as_submitted(t) for t in trajectories]
        if not items:
            raise ValueError("a group needs at least one trajectory")
        for item in items:
            if not _ID.fullmatch(item.id):
                raise ValueError(f"trajectory id {item.id!r}: use 1 to 64 letters, digits, '_', '.' or '-'")
            if item.reward is not None and not math.isfinite(float(item.reward)):
                raise ValueError(f"trajectory {item.id}: reward {item.reward!r} is not a finite number")
        body = {"step": number, "group_index": int(group_index), "trajectories": [i.to_json() for i in items]}
        answer = await self._client.request("POST", f"/api/runs/{self.run_id}/rollouts/groups/", json=body)
        self._submitted.add((number, int(group_index)))
        return answer

    async def train(self, rollout: Rollout, *, concurrency: int = 8, poll_s: float = 1.0) -> int:
        """Rolls out every step the run asks for until it ends; returns how many steps this process rolled out.
        For each group, `rollout(handle, step, scenario)` runs `group_size` times, each inside its own
        `trajectory()` (at most `concurrency` at once over the step), and returns the environment reward (a
        number), None (the judge scores it), or a `Submitted`. The group is submitted as soon as its rollouts
        finish, without those that raised; if all of a group's rollouts raise, the step's other groups are
        still submitted and then `RolloutFailed` is raised. A group the run refuses with `StepClosed` (the
        step timed out, the run was cancelled, another client submitted it, a stale adapter) is logged; if the
        run still shows it open, it is rolled out again."""
        limit = asyncio.Semaphore(concurrency)
        steps: set[int] = set()
        while (step := await self.next_step(poll_s)) is not None:
            log.info("step %s%s: rolling out %d group(s) x %d with %s", step.step,
                     f"/{step.total_steps}" if step.total_steps else "", len(step.groups), step.group_size, step.model)
            outcomes = await asyncio.gather(*(self._roll_group(rollout, step, group, limit) for group in step.groups),
                                            return_exceptions=True)
            steps.add(step.step)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
        return len(steps)

    async def _roll_group(self, rollout: Rollout, step: Step, group: GroupState, limit: asyncio.Semaphore) -> None:
        async def one() -> Submitted:
            async with limit, self.trajectory() as trajectory:
                return _finish(trajectory, await rollout(self, step, group.scenario))

        outcomes = await asyncio.gather(*(one() for _ in range(step.group_size)), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome
        done = [o for o in outcomes if isinstance(o, Submitted)]
        failed = [o for o in outcomes if isinstance(o, Exception)]
        for err in failed:
            log.warning("step %s group %s: a rollout raised %s: %s", step.step, group.group_index,
                        type(err).__name__, err)
        if not done:
            raise RolloutFailed(f"step {step.step}, group {group.group_index}: all {len(failed)} rollouts "
                                "raised; the group was not submitted") from failed[0]
        try:
            await self.submit_group(step, group.group_index, done)
            log.info("step %s group %s: submitted %d trajectories", step.step, group.group_index, len(done))
        except StepClosed as err:
            log.warning("step %s group %s was not taken: %s", step.step, group.group_index, err.detail)

    async def aclose(self) -> None:
        for http in self._http_clients:
            await http.aclose()


def _as_submitted(item: Submitted | Trajectory | str | tuple | list) -> Submitted:
    if isinstance(item, Submitted):
        return item
    if isinstance(item, Trajectory):
        return Submitted(item, item.reward, item.metadata or None, item.messages)
    if isinstance(item, str):
        return Submitted(item)
    if isinstance(item, (tuple, list)) and 1 <= len(item) <= 4:
        return Submitted(*item)
    raise TypeError(f"a submitted trajectory is a Submitted, a Trajectory, an id or a (trajectory, reward, "
                    f"metadata, messages) tuple, not {type(item).__name__}")


def _finish(trajectory: Trajectory, value: Any) -> Submitted:
    """What a rollout returned, as the trajectory to submit."""
    if isinstance(value, Submitted):
        return value if value.trajectory is not None else Submitted(trajectory, value.reward, value.metadata,
                                                                     value.messages)
    if isinstance(value, Trajectory):
        return _as_submitted(value)
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"a rollout returns a reward (a number), None or a Submitted, not {type(value).__name__}")
        trajectory.reward = float(value)
    return _as_submitted(trajectory)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
