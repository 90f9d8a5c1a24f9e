"""What one account and one project may hold at once of the workers' serving time (issue 43; docs/security.md
"Servers per account and project"): inference servers up or starting, Try it sessions not yet answered,
distillations queued or running. Projects are free to create, so a per-project cap alone bounds nothing: each
has a per-account cap beside it. A server is held by the account that owns its project (whoever asked for it);
a session or a distillation by the person who started it.

The caps are deployment settings (STUDIO_MAX_*). Over one, `CapReached` (a 429 on the API, the checkpoints'
endpoints and the pages) names the cap, the usage and what holds it, so a person can end a session or stop a
server and try again. The checks run inside the caller's transaction with the account's row locked, so two
requests of one account at once cannot both take its last place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from webapp.services.external import ExternalRefusal


@dataclass(frozen=True)
class Holder:
    """One thing that counts against a cap: what the page links to and offers to end."""

    kind: str  # "server" | "try" | "distillation"
    pk: int
    label: str
    project_id: int


class CapReached(ExternalRefusal):
    status = 429

    def __init__(self, *, what: str, scope: str, setting: str, limit: int, holders: list[Holder]) -> None:
        self.setting, self.limit, self.usage, self.scope = setting, limit, len(holders), scope
        self.holders: list[Holder] = holders
        self.kind = holders[0].kind if holders else ""
        listed = ", ".join(h.label for h in holders[:10])
        super().__init__(f"{scope} has {len(holders)} of {limit} {what} already ({setting}): "
                         f"end one first ({listed})")

    def as_body(self) -> dict[str, Any]:
        return {"detail": str(self), "cap": self.setting, "limit": self.limit, "usage": self.usage,
                "holders": [{"kind": h.kind, "id": h.pk, "label": h.label} for h in self.holders]}


def _account_locked(user_id: int | None) -> None:
    """Two requests of one account at once count one after the other (the caller holds a transaction)."""
    if user_id is not None:
        list(get_user_model().objects.select_for_update().filter(pk=user_id).values_list("pk", flat=True))


def _check(*, holders: list[Holder], limit: int, what: str, scope: str, setting: str) -> None:
    if len(holders) >= limit:
        raise CapReached(what=what, scope=scope, setting=setting, limit=limit, holders=holders)


def servers_admit(*, project: Any, base_model: str) -> None:
    """Before a new server starts for (`project`, `base_model`): the project and its owner's account are under
    their server caps. A server that is up already is reused and never counted twice."""
    from webapp.models import ProjectServer
    from webapp.selectors.serving import project_server_problem

    _account_locked(project.owner_id)
    live = (ProjectServer.objects.filter(status__in=(ProjectServer.Status.STARTING, ProjectServer.Status.READY),
                                         project__owner_id=project.owner_id)
            .exclude(project=project, base_model=base_model).select_related("project").order_by("id"))
    # A server whose worker is gone holds nothing: the next request for it restarts it, and it must not block.
    held = [Holder("server", s.pk, f"server of {s.project.name!r} for {s.base_model}", s.project_id)
            for s in live if project_server_problem(s) is None]
    _check(holders=[h for h in held if h.project_id == project.pk], limit=settings.STUDIO_MAX_SERVERS_PER_PROJECT,
           what="inference servers up", scope=f"project {project.name!r}", setting="STUDIO_MAX_SERVERS_PER_PROJECT")
    _check(holders=held, limit=settings.STUDIO_MAX_SERVERS_PER_ACCOUNT, what="inference servers up",
           scope="the account that owns this project", setting="STUDIO_MAX_SERVERS_PER_ACCOUNT")


def try_sessions_admit(*, user: Any, project: Any) -> None:
    """Before a new Try it session: the person and the project are under their caps of unanswered sessions."""
    from webapp.models import TrySession

    _account_locked(getattr(user, "pk", None))
    active = (TrySession.Status.QUEUED, TrySession.Status.STARTING, TrySession.Status.RUNNING)
    rows = TrySession.objects.filter(status__in=active).order_by("id")

    def holders(qs) -> list[Holder]:
        return [Holder("try", s.pk, f"session #{s.pk}", s.project_id) for s in qs[:100]]

    _check(holders=holders(rows.filter(project=project)), limit=settings.STUDIO_MAX_TRY_SESSIONS_PER_PROJECT,
           what="Try it sessions answering", scope=f"project {project.name!r}",
           setting="STUDIO_MAX_TRY_SESSIONS_PER_PROJECT")
    _check(holders=holders(rows.filter(created_by=user)), limit=settings.STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT,
           what="Try it sessions answering", scope="your account", setting="STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT")


def distillations_admit(*, user: Any, project: Any) -> None:
    """Before a new distillation: the person and the project are under their caps of jobs in flight."""
    from webapp.models.datasets import Distillation

    _account_locked(getattr(user, "pk", None) if getattr(user, "is_authenticated", False) else None)
    rows = Distillation.objects.filter(status__in=(Distillation.Status.QUEUED, Distillation.Status.RUNNING)) \
        .order_by("id")

    def holders(qs) -> list[Holder]:
        return [Holder("distillation", d.pk, f"distillation #{d.pk}", d.project_id) for d in qs[:100]]

    _check(holders=holders(rows.filter(project=project)), limit=settings.STUDIO_MAX_DISTILLATIONS_PER_PROJECT,
           what="distillations in flight", scope=f"project {project.name!r}",
           setting="STUDIO_MAX_DISTILLATIONS_PER_PROJECT")
    if getattr(user, "is_authenticated", False):
        _check(holders=holders(rows.filter(created_by=user)), limit=settings.STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT,
               what="distillations in flight", scope="your account", setting="STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT")
