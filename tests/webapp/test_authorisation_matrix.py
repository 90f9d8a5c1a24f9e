"""The authorisation matrix, generated from the URL configuration: every page, API endpoint and websocket, for
each role (anonymous, another project's admin, viewer, reviewer, editor, the project's admin) and each method,
gets the status its entry in EXPECTED says. A URL without an entry (or an entry without a URL) fails.

An entry gives, per allowed method, the least role that may use it and the status that role gets with an empty
body (400 means: allowed past the checks, then the empty body was refused). From it the rest follows: a logged
out visitor is sent to the login page (pages) or gets 401 (API); another project's admin gets 404 (they never
learn the object exists); a member below the least role gets 403; any other method gets 405. "any" means any
logged-in user (lists show only their own projects' objects).
"""
from __future__ import annotations

import asyncio

import re
from dataclasses import dataclass, field
from typing import Iterator

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver

from tests.judge_double import HttpError, JudgeDouble
from tests.webapp.authz_world import MEMBER_RANK, METHODS, ROLES, World, build_world

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Entry:
    api: bool
    allowed: dict[str, tuple[str, int]] = field(default_factory=dict)  # method -> (least role, its status)


def page(**allowed: tuple[str, int]) -> Entry:
    return Entry(api=False, allowed={m.upper(): v for m, v in allowed.items()})


def api(**allowed: tuple[str, int]) -> Entry:
    return Entry(api=True, allowed={m.upper(): v for m, v in allowed.items()})


V, R, E = "viewer", "reviewer", "editor"
EXPECTED: dict[str, Entry] = {
    # pages
    "project-list": page(get=("any", 200), post=("any", 400)),
    "project-detail": page(get=(V, 200)),
    "guided-start": page(get=("any", 200), post=("any", 400)),  # makes a project of the user's own
    "project-guided-start": page(get=(E, 200), post=(E, 400)),
    "project-member-add": page(post=(E, 400)),  # re-rendered with the form's errors beside it
    "project-member-remove": page(post=(E, 302)),
    "project-queue-priority": page(post=("owner", 302)),  # the owner's alone; a bad value is a message
    "project-tokens": page(get=(V, 200), post=(E, 400)),  # members see the list; an empty name is refused
    "project-token-revoke": page(post=(E, 302)),
    "project-notifications": page(get=(V, 200), post=(V, 400)),  # an empty POST names no action
    "project-webhook-delete": page(post=(E, 302)),
    "agent-create": page(get=(E, 200), post=(E, 400)),
    "agent-from-example": page(get=(E, 200), post=(E, 400)),
    "agent-edit": page(get=(E, 200), post=(E, 400)),
    "agent-prompt-budget": page(post=(E, 200)),  # an empty body: "once the numbers are filled in"
    "scenario-set-create": page(get=(E, 200), post=(E, 400)),
    "scenario-set-detail": page(get=(V, 200), post=(E, 400)),
    "scenario-edit": page(get=(E, 200), post=(E, 400)),
    "scenario-set-generate": page(get=(E, 200), post=(E, 200)),  # a POST without an action shows the page again
    "dataset-create": page(get=(E, 200), post=(E, 400)),
    "dataset-detail": page(get=(V, 200), post=(E, 400)),  # an upload without a file is refused beside the form
    "dataset-export": page(get=(V, 200)),
    "distillation-create": page(get=(E, 200), post=(E, 400)),
    "distillation-detail": page(get=(V, 200)),
    "distillation-accept": page(post=(E, 302)),  # back to the review, the refusal (nothing pending) in the message bar
    "distillation-draft": page(post=(E, 302)),  # an empty action is refused in the message bar
    "distillation-cancel": page(post=(E, 302)),  # the world's job is done: refused in the message bar
    "rubric-create": page(get=(E, 200), post=(E, 400)),
    "rubric-detail": page(get=(V, 200), post=(E, 400)),
    "judge-create": page(get=(E, 200), post=(E, 400)),
    "judge-edit": page(get=(E, 200), post=(E, 400)),
    "judge-test": page(post=(E, 200)),  # the failed call is the result (the world's judge answers 401)
    "judge-check": page(get=(E, 200), post=(E, 400)),  # the judge's failure shown as the form's error
    # an HTTP server; a stdio server names the deployment's catalogue, and every role's attempt to give one a
    # command is refused: tests/security/test_mcp_stdio_attacks.py (test_mcp_roles)
    "mcp-server-create": page(get=(E, 200), post=(E, 400)),
    "mcp-server-detail": page(get=(V, 200)),
    "mcp-server-edit": page(get=(E, 200), post=(E, 400)),
    "mcp-server-test": page(get=(E, 200), post=(E, 200)),  # POST queues the test for a worker; GET is the poll
    "mcp-server-delete": page(get=(E, 200), post=(E, 302)),  # the confirmation; the world's agents do not use it
    "run-list": page(get=(V, 200)),
    "run-launch": page(get=(E, 200), post=(E, 400)),
    "run-detail": page(get=(V, 200)),
    "run-header": page(get=(V, 200)),
    "run-steps": page(get=(V, 200)),
    "run-external": page(get=(V, 404)),  # members only; the world's run is no external agent's, so it has no panel
    "run-external-calls": page(get=(V, 404)),  # the same: no recorded calls to export
    "run-checkpoints": page(get=(V, 200)),
    "run-checkpoint-table": page(get=(V, 200)),
    "checkpoint-evaluate": page(post=(E, 302)),  # back to the run page, with the outcome in the message bar
    "run-groups": page(get=(V, 200)),
    "run-review": page(get=(V, 200)),
    "run-approve": page(post=(R, 302)),
    "run-compare": page(get=(V, 200)),
    "runs-compare": page(get=(V, 200)),  # read-only pages refuse POST (405)
    "run-export": page(get=(V, 200)),  # read-only pages refuse POST (405)
    "run-scenario": page(get=(V, 200)),
    "run-control": page(post=(E, 302)),
    "group-detail": page(get=(V, 200)),
    "group-reorder": page(post=(R, 302)),  # pages redirect back with the form's errors
    "trajectory-override": page(post=(R, 302)),
    "run-fork": page(get=(E, 200), post=(E, 400)),
    "playground": page(get=(V, 200), post=(R, 400)),
    "playground-detail": page(get=(V, 200)),
    "playground-save": page(post=(E, 302)),
    "trajectory-detail": page(get=(V, 200)),
    "checkpoint-download": page(get=(V, 200)),
    # using what a run trained (issue 37): asking and saving are an editor's, judging a reviewer's; an empty form 400
    "try-page": page(get=(V, 200), post=(E, 400)),
    "try-session": page(get=(V, 200)),
    "try-judge": page(post=(R, 400)),
    "try-save": page(post=(E, 400)),
    "try-end": page(post=(E, 302)),  # the world's session is done: nothing to end, back to the Try it page
    "try-server-stop": page(post=(E, 302)),  # no server named: said in the message bar
    "checkpoint-export": page(post=(E, 302)),  # to the export's page (queued; nothing consumes it here)
    "export-detail": page(get=(V, 200)),
    "export-download": page(get=(V, 404)),  # the world's export failed: nothing to download, for anyone
    # API
    "api:api-token": api(post=("public", 400)),
    "api:api-schema": api(get=("public", 200)),  # the OpenAPI schema documents, it reveals no data
    "api:api-docs": api(get=("public", 200)),  # the Swagger UI page for that schema, served locally
    "api:api-root": api(get=("any", 200)),
    "api:project-list": api(get=("any", 200), post=("any", 400)),
    "api:project-detail": api(get=(V, 200)),
    "api:agent-list": api(get=("any", 200), post=("any", 400)),
    "api:agent-detail": api(get=(V, 200), put=(E, 400), patch=(E, 200)),
    "api:scenario-set-list": api(get=("any", 200), post=("any", 400)),
    "api:scenario-set-detail": api(get=(V, 200)),
    "api:scenario-set-scenarios": api(get=(V, 200), post=(E, 400)),
    "api:scenario-set-upload": api(post=(E, 400)),
    "api:dataset-list": api(get=("any", 200), post=("any", 400)),
    "api:dataset-detail": api(get=(V, 200)),
    "api:dataset-upload": api(post=(E, 400)),
    "api:dataset-versions": api(get=(V, 200)),
    "api:dataset-version-detail": api(get=(V, 200)),
    "api:dataset-version-rows": api(get=(V, 200)),
    "api:dataset-version-export": api(get=(V, 200)),
    "api:distillation-list": api(get=("any", 200), post=("any", 400)),
    "api:distillation-detail": api(get=(V, 200)),
    "api:distillation-drafts": api(get=(V, 200)),
    "api:distillation-cancel": api(post=(E, 400)),  # the world's job is done: nothing to cancel
    "api:rubric-list": api(get=("any", 200), post=("any", 400)),
    "api:rubric-detail": api(get=(V, 200)),
    "api:rubric-versions": api(post=(E, 400)),
    "api:judge-config-list": api(get=("any", 200), post=("any", 400)),
    "api:judge-config-detail": api(get=(V, 200), put=(E, 400), patch=(E, 200)),
    "api:mcp-server-list": api(get=("any", 200), post=("any", 400)),
    "api:mcp-server-detail": api(get=(V, 200), put=(E, 400), patch=(E, 200), delete=(E, 204)),
    "api:mcp-server-test": api(get=(E, 200), post=(E, 202)),  # queued for a worker (202), then read by GET
    "api:mcp-catalogue": api(get=("any", 200)),  # the deployment's stdio servers: names and descriptions only
    "api:run-list": api(get=("any", 200), post=("any", 400)),
    "api:run-detail": api(get=(V, 200)),
    "api:run-agreement": api(get=(V, 200)),
    "api:run-approve": api(post=(R, 200)),
    "api:run-cancel": api(post=(E, 200)),
    "api:run-checkpoints": api(get=(V, 200)),
    "api:run-compare": api(get=(V, 200)),
    "api:run-fork": api(post=(E, 400)),
    "api:run-groups": api(get=(V, 200)),
    "api:run-overrides": api(get=(V, 200)),
    "api:run-pause": api(post=(E, 400)),
    "api:run-resume": api(post=(E, 400)),
    "api:run-review-queue": api(get=(V, 200)),
    "api:run-steps": api(get=(V, 200)),
    "api:group-detail": api(get=(V, 200)),
    "api:group-reorder": api(post=(R, 400)),
    "api:trajectory-detail": api(get=(V, 200)),
    "api:trajectory-override": api(post=(R, 400)),
    "api:trajectory-overrides": api(get=(V, 200)),
    "api:playground-list": api(get=("any", 200), post=("any", 400)),
    "api:playground-detail": api(get=(V, 200)),
    "api:playground-save-version": api(post=(E, 400)),
    # external rollouts: an editor's (or a project token's); the world's run serves nothing, so its endpoint is a 409
    "api:run-rollouts": api(get=(E, 200)),
    "api:run-rollouts-groups": api(post=(E, 400)),
    "api:run-openai-chat": api(post=(E, 400)),
    "api:run-openai-models": api(get=(E, 409)),
    # checkpoints served after their run: an editor's (or a project token's); an empty body is refused first
    "api:checkpoint-openai-chat": api(post=(E, 400)),
    "api:checkpoint-openai-models": api(get=(E, 200)),
    "api:project-openai-chat": api(post=(E, 400)),
    "api:project-openai-models": api(get=(E, 200)),
    # pages anyone may open
    "login": page(get=("public", 200), post=("public", 200)),
    "logout": page(post=("public", 302)),
    "invite-accept": page(get=("public", 200), post=("public", 200)),  # a wrong/spent token: "link invalid" page
    "docs": page(get=("public", 302)),  # to the API docs page, public like it
    # the user's own API token page (an empty POST names no action: 400)
    "api-token": page(get=("any", 200), post=("any", 400)),
}
PUBLIC_PAGES = {"login", "logout", "invite-accept"}
# URL arguments that name another of the world's ids than their own name (scenario-edit's scenario_id is the
# scenario's primary key; run-scenario's is the external id the run knows it by).
ARG_IDS = {"scenario-edit": {"scenario_id": "scenario_pk"}}
QUERY = {"api:run-compare": "?t={trajectory_id}", "run-compare": "?t={trajectory_id}"}  # what they compare
# The API router's ids → the world's objects.
API_PK = {"project": "project_id", "agent": "agent_id", "scenario-set": "scenario_set_id", "rubric": "rubric_id",
          "dataset": "dataset_id", "dataset-version": "version_id", "distillation": "distillation_id",
          "judge-config": "judge_id", "mcp-server": "server_id", "run": "run_id", "group": "group_id", "trajectory": "trajectory_id",
          "playground": "rescore_id", "checkpoint": "checkpoint_id"}


def _routes() -> dict[str, tuple[str, list[str]]]:
    """name -> (path template, argument names). The API's `.json` format-suffix twins serve the same views."""
    routes: dict[str, tuple[str, list[str]]] = {}

    def walk(patterns, prefix: str, namespace: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern), f"{p.namespace}:" if p.namespace else namespace)
            elif isinstance(p, URLPattern) and "format" not in str(p.pattern):
                name = namespace + (p.name or str(p.pattern))
                assert name not in routes, f"two URLs named {name}"
                template = (prefix + str(p.pattern)).replace("^", "").replace("$", "")
                routes[name] = (template, re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", template))

    walk(get_resolver().url_patterns, "", "")
    return {name: (template, [a or b for a, b in args]) for name, (template, args) in routes.items()}


ROUTES = _routes()


def _path(name: str, world: World) -> str:
    template, args = ROUTES[name]
    values = {arg: world.ids[_api_pk(name) if arg == "pk" else ARG_IDS.get(name, {}).get(arg, arg)] for arg in args}
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: str(values[m.group(1)]), template)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), path)
    return "/" + path + QUERY.get(name, "").format(**world.ids)


def _api_pk(name: str) -> str:
    base = name.split(":", 1)[1]
    for prefix in sorted(API_PK, key=len, reverse=True):
        if base.startswith(prefix + "-"):
            return API_PK[prefix]
    raise KeyError(name)


def expected_status(entry: Entry, name: str, role: str, method: str) -> int:
    least, ok = entry.allowed.get(method, (None, 405))
    if not entry.api and method not in ("GET", "POST"):
        return 405  # pages are forms and links: refused before anything else
    public = any(who == "public" for who, _ in entry.allowed.values())
    if role == "anonymous" and not public:
        return 401 if entry.api else 302
    if least is None:
        return 405
    if least in ("public", "any"):
        return ok
    if role == "other_admin":
        return 404
    if least == "owner":  # the project's owner ("admin") only, not its other editors
        return ok if role == "admin" else 403
    return ok if MEMBER_RANK[role] >= MEMBER_RANK[least] else 403


def test_every_url_has_an_entry_and_every_entry_a_url():
    assert sorted(set(ROUTES) - set(EXPECTED)) == [], "add these URLs to EXPECTED"
    assert sorted(set(EXPECTED) - set(ROUTES)) == [], "these entries name no URL"


@pytest.fixture
def world(tmp_path) -> Iterator[World]:
    # The world's judge answers every call 401 (a bad key), which the judge check reports at once; a refused
    # connection it would retry with backoff, 12 s per allowed POST.
    with JudgeDouble(responder=lambda request: HttpError(401, "invalid api key")) as judge:
        yield build_world(tmp_path, judge_api_base=judge.api_base)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_role_and_method_gets_the_expected_status(name, world, matrix_cases):
    entry = EXPECTED[name]
    path = _path(name, world)
    wrong = []
    for role in ROLES:
        client = world.client(role, entry.api)
        for method in METHODS:
            with transaction.atomic():  # each case starts from the same world
                response = getattr(client, method.lower())(path, **({"format": "json"} if entry.api and method != "GET" else {}))
                transaction.set_rollback(True)
            want = expected_status(entry, name, role, method)
            matrix_cases.append((name, role, method))
            if response.status_code != want:
                wrong.append(f"{method} {path} as {role}: {response.status_code}, expected {want}")
    assert not wrong, "\n".join(wrong)


WEBSOCKET_EXPECTED = {"anonymous": 4401, "other_admin": 4404, "viewer": None, "reviewer": None, "editor": None,
                      "admin": None}  # None: accepted


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ROLES)
async def test_the_run_websocket_admits_members_only(role, tmp_path, matrix_cases):
    from django.contrib.auth.models import AnonymousUser

    from webapp.asgi import application

    world = await sync_to_async(build_world)(tmp_path)
    socket = WebsocketCommunicator(application, f"/ws/runs/{world.ids['run_id']}/",
                                   headers=[(b"host", b"localhost"), (b"origin", b"http://localhost")])
    socket.scope["user"] = world.users[role] or AnonymousUser()
    connected, _ = await socket.connect()
    matrix_cases.append(("ws:run", role, "CONNECT"))
    want = WEBSOCKET_EXPECTED[role]
    # A refusal accepts the handshake and closes at once with its code (a browser sees the code, not HTTP 403).
    assert connected
    if want is None:
        try:  # a member's socket stays open: what comes first (its replay, if any) is no close
            first = await socket.receive_output(timeout=0.5)
        except asyncio.TimeoutError:
            first = None
        assert first is None or first["type"] != "websocket.close", first
        await socket.disconnect()
    else:
        assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": want}
