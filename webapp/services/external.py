"""External rollouts (issue 21), the web app's writes: the clients that roll out for a run, the calls they
sample through its endpoint, and the groups they submit. A submitted trajectory is checked against its recorded
calls and built into the engine's trajectory (training.rl.external.assemble_trajectory: the tokens that train are
the tokens that were sampled); the runner forwards stored groups to the engine (execution/runner.py).
The feature starts here; its parts: services/external_{request,proxy,calls,inflight,checkpoints}.py,
selectors/external.py, models/external.py, api/external_views.py and external_serializers.py (docs/webapp.md).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from training.rl.external import StaleModel, UnsampledTurn, assemble_trajectory, group_opening
from webapp.live.ingest import run_app_event_publish
from webapp.models import ExternalCall, ExternalClient, ExternalGroup, ExternalTrajectory, ProjectToken, Run
from webapp.selectors.external import CONNECTED_S, rollouts_open_step
from webapp.services.external_calls import ID_PATTERN, external_call_conversations
from webapp.storable import storable


class ExternalRefusal(Exception):
    """A request the rollouts API refuses with `status` (the API answers it in its one error shape)."""

    status = 409


class TooLarge(ExternalRefusal):
    status = 413


class NotSampled(ExternalRefusal):
    status = 422


class NotServing(ExternalRefusal):
    status = 409


def external_id_check(*, value: str, field: str) -> str:
    if not ID_PATTERN.match(value or ""):
        raise ValidationError({field: [f"{field} must be 1 to 64 letters, digits, '_', '.' or '-'"]})
    return value


def external_client_seen(*, run: Run, client_id: str) -> ExternalClient:
    """Marks a client as seen now (header X-Client-Id); one that was not connected announces itself to the run
    page (a `rollouts_client` event)."""
    external_id_check(value=client_id, field="X-Client-Id")
    now = timezone.now()
    with transaction.atomic():
        client, created = ExternalClient.objects.select_for_update().get_or_create(
            run=run, client_id=client_id, defaults={"last_seen": now, "requests": 1})
        if not created:
            was_connected = client.last_seen >= now - timedelta(seconds=CONNECTED_S)
            ExternalClient.objects.filter(pk=client.pk).update(last_seen=now, requests=client.requests + 1)
        if created or not was_connected:
            run_app_event_publish(run_id=run.pk, kind="rollouts_client", payload={"client_id": client_id})
    return client


def _checked(run: Run, wanted: dict[str, Any], group_index: int, trajectories: list[dict[str, Any]]) -> None:
    """The body's limits and references, before any work (the sizes are 413s, the rest 400s)."""
    indexes = [int(g["group_index"]) for g in wanted.get("groups") or []]
    if group_index not in indexes:
        raise ValidationError({"group_index": [f"step {wanted['step']} has no group {group_index}; its groups are "
                                               f"{', '.join(map(str, indexes)) or 'none'}"]})
    group_size = int(wanted.get("group_size") or 0)
    if len(trajectories) > group_size:
        raise TooLarge(f"{len(trajectories)} trajectories; a group of this run has at most {group_size}")
    limit = settings.STUDIO_EXTERNAL_MAX_MESSAGES
    for t in trajectories:
        if len(t.get("messages") or []) > limit:
            raise TooLarge(f"trajectory {t['id']} has {len(t['messages'])} messages; the limit is {limit} "
                           "(STUDIO_EXTERNAL_MAX_MESSAGES)")
    ids = [t["id"] for t in trajectories]
    if len(set(ids)) != len(ids):
        raise ValidationError({"trajectories": ["each trajectory of a group needs its own id"]})
    if not run.uses_judge and any(t.get("reward") is None for t in trajectories):
        raise ValidationError({"trajectories": ["this run has no judge: every trajectory needs its `reward`"]})


def _step_calls(run: Run, key: str, step: int) -> list[dict[str, Any]]:
    """The trajectory's calls recorded for this step, each with everything it was sent (rebuilt from its parents,
    which may be older calls of the same id)."""
    calls = list(ExternalCall.objects.filter(run=run, trajectory_key=key).order_by("id"))
    rebuilt = external_call_conversations(calls)
    return [c for c, row in zip(rebuilt, calls) if row.step == step]


def external_group_submit(*, user, token: Any, run: Run, step: int, group_index: int,
                          trajectories: list[dict[str, Any]]) -> ExternalGroup:
    """Stores a submitted group, each trajectory built from its recorded calls. Refuses: 409 when the step is not
    open, the group came already, an id was used before or a turn was sampled with another step's adapter; 413 over
    the limits; 422 a turn that was never sampled (unless the run allows it), or sampled after other messages than
    the ones before it, or a trajectory that does not open with the run's system prompt and the group's scenario;
    400 anything else malformed."""
    wanted_event = rollouts_open_step(run=run)
    if wanted_event is None or int(wanted_event.payload.get("step", -1)) != step:
        open_step = wanted_event.payload.get("step") if wanted_event else None
        raise ExternalRefusal(f"step {step} is not open for groups" + (
            f"; step {open_step} is" if open_step is not None else "; the run is waiting for no groups now"))
    wanted = wanted_event.payload
    _checked(run, wanted, group_index, trajectories)
    trajectories = storable(trajectories)  # as their recorded calls were stored, so the turns still match
    if ExternalGroup.objects.filter(run=run, step=step, group_index=group_index).exists():
        raise ExternalRefusal(f"group {group_index} of step {step} was submitted already")
    used = set(ExternalTrajectory.objects.filter(run=run, key__in=[t["id"] for t in trajectories])
               .values_list("key", flat=True))
    if used:
        raise ExternalRefusal(f"trajectory id(s) {', '.join(sorted(used))} were used in an earlier group; each "
                              "trajectory needs a new id")
    scenario = next(g for g in wanted["groups"] if int(g["group_index"]) == group_index).get("scenario") or {}
    opening = group_opening(scenario, str(wanted.get("system_prompt") or ""))
    assembled = []
    for t in trajectories:
        try:
            assembled.append(assemble_trajectory(
                scenario_id=str(scenario.get("id", "")), calls=_step_calls(run, t["id"], step), opening=opening,
                messages=t.get("messages"), reward=t.get("reward"),
                metadata={**(t.get("metadata") or {}), "trajectory_id": t["id"]}, model=str(wanted.get("model")),
                allow_unsampled=bool(wanted.get("allow_unsampled"))))
        except UnsampledTurn as err:
            raise NotSampled(f"trajectory {t['id']}: {err}") from None
        except StaleModel as err:
            raise ExternalRefusal(f"trajectory {t['id']}: {err}") from None
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise ValidationError({"trajectories": [f"trajectory {t['id']}: {err}"]}) from None
    try:
        with transaction.atomic():
            group = ExternalGroup.objects.create(
                run=run, step=step, group_index=group_index, trajectories=assembled, submitted_by=user,
                token=token if isinstance(token, ProjectToken) else None)
            ExternalTrajectory.objects.bulk_create(ExternalTrajectory(run=run, group=group, key=t["id"])
                                                   for t in trajectories)
            run_app_event_publish(run_id=run.pk, kind="rollouts_submitted", payload={
                "step": step, "group_index": group_index, "trajectories": len(assembled)})
    except IntegrityError:  # a submission of the same group or ids that won a race with this one
        raise ExternalRefusal(f"group {group_index} of step {step}, or one of its trajectory ids, was submitted "
                              "already") from None
    return group


def external_groups_mark_forwarded(*, group_ids: list[int]) -> None:
    ExternalGroup.objects.filter(pk__in=group_ids).update(forwarded_at=timezone.now())
