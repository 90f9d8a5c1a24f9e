"""The one place where engine events become database rows and live messages (DESIGN §5).

`run_event_ingest` takes an event as the engine emits it (`event.to_dict()`, a dict with `kind`), and in one
transaction: updates the run, writes the Step / TrajectoryGroup / Trajectory / Checkpoint / JudgeCall rows,
appends a RunEvent with the next sequence number, and after commit sends that RunEvent to `run_<id>`.
The stored payload is what the browser is sent: compact (no full message lists) so a late page replays fast.
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.execution.engine_address import engine_address_problem
from webapp.live.evaluation_events import (alert_payload, evaluation_failed_payload, evaluation_payload,
                                           held_out_loss_payload, tracker_failed_payload)
from webapp.live.judge_budget_wait import judge_budget_wait_payload
from webapp.live.judge_outage import judge_unavailable_payload
from webapp.live.override_redo import overrides_capture, overrides_settle
from webapp.live.publish import publish
from webapp.models import Checkpoint, JudgeCall, Run, RunEvent, RunStatus, Scenario, Step, Trajectory, TrajectoryGroup
from webapp.models.runs import ACTIVE_STATUSES
from webapp.notifications.events import run_event_notify
from webapp.review_state import PAUSING, held_phase, paused_before_review_phase
from webapp.run_policy import text_for_people, worker_paths
from webapp.storable import storable

log = logging.getLogger(__name__)
EXPLANATION_PREVIEW = 600


def _num(value: Any) -> float | None:
    """JSON has no NaN; an engine metric that is NaN/inf is shown as missing rather than breaking the stream."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: Any) -> int | None:
    """A token count from the engine: a non-negative int, else unknown (never a made-up 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _clean(value: Any) -> Any:
    """JSON the database keeps: no NaN (see `_num`), no U+0000 (see webapp.storable)."""
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _run_summary(run: Run) -> dict[str, Any]:
    return {"status": run.status, "status_label": run.get_status_display(), "phase": run.phase,
            "steps_done": run.steps_done, "total_steps": run.total_steps, "error": run.error[:2000],
            "cancel_requested": run.cancel_requested}


def _append(run: Run, kind: str, payload: dict[str, Any]) -> RunEvent:
    """Appends under the run's row lock, so sequence numbers are gap-free and ordered per run."""
    run.last_event_seq += 1
    Run.objects.filter(pk=run.pk).update(last_event_seq=run.last_event_seq)
    event = RunEvent.objects.create(run=run, seq=run.last_event_seq, kind=kind,
                                    payload={**payload, "run": _run_summary(run)})
    message = event.as_message()
    transaction.on_commit(lambda: publish(run.pk, message))
    run_event_notify(run=run, event=event)  # the people a run now needs are told (webapp/notifications/)
    return event


def run_status_publish(*, run_id: int) -> RunEvent:
    """Appends a `status` event after a state-machine transition (call inside the transition's transaction)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        return _append(run, "status", {})


def run_override_publish(*, run_id: int, group_id: int, step: int) -> RunEvent:
    """Appends an `override` event after a person changed a group's human scores (inside that transaction), so
    a run page open elsewhere re-renders the group's card as a reload would show it."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        return _append(run, "override", {"group_id": group_id, "step": step})


def run_app_event_publish(*, run_id: int, kind: str, payload: dict[str, Any]) -> RunEvent:
    """Appends an event the web app itself raises (external rollouts: a group submitted, a client connected), so
    the run page updates the parts it shows as a reload would (call inside the change's transaction)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        return _append(run, kind, _clean(payload))


def run_event_ingest(*, run_id: int, event: dict[str, Any]) -> RunEvent:
    event = _clean(event)  # once, for every handler: no NaN, and the model's, judge's and tools' text storable
    kind = str(event.get("kind", ""))
    handler = _HANDLERS.get(kind)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if handler is None:
            log.warning("run %s: unknown engine event kind %r stored as is", run_id, kind)
            payload = {k: v for k, v in event.items() if k != "kind"}
        else:
            payload = handler(run, event)
        return _append(run, kind or "unknown", payload)


def _set_phase(run: Run, phase: str, **fields: Any) -> None:
    if run.status == RunStatus.PAUSED and run.phase.startswith(("paused", PAUSING)) and "status" not in fields:
        # Paused by a judge budget or a monitor, or by a person ("pausing after step N", review_state.py): the
        # engine still finishes its phase, but the run keeps saying why and where it stops.
        phase = run.phase
    run.phase = phase
    for key, value in fields.items():
        setattr(run, key, value)
    Run.objects.filter(pk=run.pk).update(phase=phase, **fields)


def _on_run_started(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    start = int(e.get("start_step", 1))  # steps are 1-based: a fresh run starts at 1
    verb = "resumed at step" if e.get("resumed") else "started at step"
    # A resume redoes the steps after the last checkpoint, and their new rewards are not handed over yet:
    # overrides on them train again, so they must not be labelled as labels only.
    reviewed = min(run.reviewed_through_step, max(0, start - 1))
    # An approval stands for the groups it approved: kept across a park (the engine takes them up again,
    # `scored_step`), void for a step rolled out again.
    kept = int(e.get("scored_step") or 0)
    approved = run.review_approved_step if kept and kept == run.review_approved_step else \
        min(run.review_approved_step, max(0, start - 1))
    if e.get("resumed") and start > 1:
        _record_resumed_checkpoint(run, start - 1, e)
    phase = f"went on with step {start}'s groups, kept when it parked" if kept else f"{verb} {start}"
    _set_phase(run, phase, total_steps=int(e.get("total_steps", run.total_steps)),
               steps_done=max(0, start - 1), reviewed_through_step=reviewed, review_approved_step=approved)
    return {"start_step": start, "total_steps": run.total_steps, "resumed": bool(e.get("resumed")), "scored_step": kept}


def _on_model_download(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The worker fetching the run's hub model before the engine starts (webapp/execution/model_fetch.py)."""
    from training.model.hub import size_text

    model, state = str(e.get("model") or "")[:200], str(e.get("state") or "")
    done, total = _count(e.get("done")) or 0, _count(e.get("total")) or 0
    phase = {"downloading": f"downloading {model}: {size_text(done, total)}",
             "downloaded": f"downloaded {model}; starting the engine",
             "cached": f"{model} is in this worker's model cache; starting the engine"}.get(state, f"{model}: {state}")
    _set_phase(run, phase[:200])
    return {"model": model, "state": state, "done": done, "total": total}


def _on_memory_planned(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """How the engine shares the GPUs between vLLM and the trainer (training/model/gpu/memory_plan.py): shown on the run
    page from this event (webapp/selectors/runs.py)."""
    sharing, reason = str(e.get("sharing") or ""), str(e.get("reason") or "")
    _set_phase(run, f"GPU sharing: {sharing}")
    share = e.get("gpu_memory_utilization")
    return {"sharing": sharing, "reason": reason, "gpu_memory_utilization": float(share) if share else None,
            "lines": [str(line) for line in e.get("lines") or []][:40]}


def _record_resumed_checkpoint(run: Run, step: int, e: dict[str, Any]) -> None:
    """A worker killed after the engine saved a checkpoint but before its events were recorded: the engine
    resumes after that checkpoint, so record it (and a row for each such step, whose metrics were lost with the
    worker; its scored groups are the ones recorded before the kill)."""
    if e.get("checkpoint_path"):
        Checkpoint.objects.get_or_create(run=run, step_index=step, defaults={
            "path": str(e["checkpoint_path"]), "adapter_name": str(e.get("adapter_name") or "")})
    recorded = set(Step.objects.filter(run=run, index__lte=step).values_list("index", flat=True))
    Step.objects.bulk_create(Step(run=run, index=i, metrics={"lost_with_worker": True})
                             for i in range(1, step + 1) if i not in recorded)


def _on_group_rolled_out(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    step = int(e["step"])
    _set_phase(run, f"step {step}: scoring group {int(e['group_index']) + 1}")
    return {"step": step, "group_index": int(e["group_index"]), "scenario_id": str(e.get("scenario_id", "")),
            "trajectories": int(e.get("trajectories", 0)), "errors": [str(x) for x in e.get("errors", [])]}


def _ranked(records: list[dict[str, Any]]) -> list[int]:
    """Rank 1 = highest reward; trajectories without a reward (errors) come last."""
    order = sorted(range(len(records)), key=lambda i: (_num(records[i].get("reward")) is None,
                                                       -(_num(records[i].get("reward")) or 0.0), i))
    ranks = [0] * len(records)
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    return ranks


def _on_group_scored(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    step, index = int(e["step"]), int(e["group_index"])
    scenario_id = str(e.get("scenario_id", ""))
    records = list(e.get("trajectories") or [])
    scenario = Scenario.objects.filter(scenario_set_id=run.scenario_set_id, external_id=scenario_id).first()
    # A resumed run re-does the step it crashed in: its groups replace the half-recorded ones. The judge calls
    # of the replaced group were paid for: they stay in the run's accounting, detached from the group.
    replaced = TrajectoryGroup.objects.filter(run=run, step_index=step, index=index)
    JudgeCall.objects.filter(group__in=replaced).update(group=None)
    # Their human scores are carried to the new rollout where it gives the same answer, else marked discarded.
    captured = overrides_capture(groups=list(replaced))
    replaced.delete()
    group = TrajectoryGroup.objects.create(
        run=run, step_index=step, index=index, scenario=scenario, scenario_external_id=scenario_id,
        role=str(e.get("role") or "")[:40], reward_mean=_num(e.get("reward_mean")), reward_std=_num(e.get("reward_std")),
        skipped=bool(e.get("skipped")), errors=[str(x) for x in e.get("errors") or []],
        scoring_error=str(e.get("scoring_error") or ""),
    )
    judge_model = str((run.config.get("judge") or {}).get("judge_model", ""))
    ranks = _ranked(records)
    rows = [
        Trajectory(
            group=group, index=i, rank=ranks[i], messages=r.get("messages") or [], tools=r.get("tools"),
            env_reward=_num(r.get("env_reward")), judge_score=_num(r.get("judge_score")),
            explanation=str(r.get("explanation") or ""), criteria=r.get("criteria") or {},
            reward=_num(r.get("reward")), advantage=_num(r.get("advantage")), error=str(r.get("error") or ""),
            completion_tokens=int(r.get("completion_tokens") or 0), metadata=r.get("metadata") or {},
            rubric_version_id=run.rubric_version_id if r.get("judge_score") is not None else None,
            judge_model=judge_model if r.get("judge_score") is not None else "",
            role=str(r.get("role") or "")[:40], episode=str(r.get("episode") or "")[:40],
        )
        for i, r in enumerate(records)
    ]
    Trajectory.objects.bulk_create(rows)
    if captured and overrides_settle(run=run, captured=captured, group=group):
        group.refresh_from_db()
        rows = list(group.trajectories.order_by("index"))
    _set_phase(run, f"step {step}: group {index + 1} scored")
    saved = {t.index: t.pk for t in group.trajectories.only("id", "index")}
    return {
        "step": step, "group_index": index, "group_id": group.pk, "scenario_id": scenario_id, "role": group.role,
        "reward_mean": group.reward_mean, "reward_std": group.reward_std, "skipped": group.skipped,
        "errors": group.errors, "scoring_error": group.scoring_error,
        "trajectories": sorted(
            ({"id": saved[t.index], "rank": t.rank, "reward": t.reward, "judge_score": t.judge_score,
              "env_reward": t.env_reward, "advantage": t.advantage, "error": t.error[:300],
              "explanation": t.explanation[:EXPLANATION_PREVIEW]} for t in rows),
            key=lambda item: item["rank"],
        ),
    }


def _on_judge_usage(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The engine's JudgeUsage event: one JudgeCall row per request, cache hits marked `cached` (they cost
    nothing and are counted apart on the pages and in the run budget)."""
    step, index = int(e["step"]), int(e["group_index"])
    group = TrajectoryGroup.objects.filter(run=run, step_index=step, index=index).first()
    judge_model = str(e.get("judge_model") or (run.config.get("judge") or {}).get("judge_model", ""))
    record = {"passes": int(e.get("passes") or 1), "disagreement": _num(e.get("disagreement")),
              "identical": bool(e.get("identical")), "truncated": [int(i) for i in e.get("truncated") or []],
              "requests": int(e.get("requests") or 0), "cache_hits": int(e.get("cache_hits") or 0)}
    if group is not None:
        JudgeCall.objects.filter(group=group).delete()  # a resumed step's group was re-judged
        # The group's judge record (the review queue reads `disagreement`; pages show identical / truncated)
        # lives on its first trajectory's metadata, as it always has.
        first = group.trajectories.order_by("index").first()
        if first is not None:
            first.metadata = {**(first.metadata or {}), "judge": record}
            first.save(update_fields=["metadata"])
    calls = [c for c in e.get("calls") or [] if isinstance(c, dict)]
    JudgeCall.objects.bulk_create(
        JudgeCall(run=run, group=group, judge_model=str(c.get("judge_model") or judge_model),
                  prompt_hash=str(c.get("prompt_hash") or "")[:128], prompt_tokens=int(c.get("prompt_tokens") or 0),
                  completion_tokens=int(c.get("completion_tokens") or 0),
                  cost_usd=0.0 if c.get("cache_hit") else _num(c.get("cost_usd")),
                  uncached_cost_usd=0.0 if c.get("cache_hit") else _num(c.get("uncached_cost_usd")),
                  prefix_tokens=_count(c.get("prefix_tokens")), counted_tokens=_count(c.get("counted_tokens")),
                  cached_tokens=_count(c.get("cached_tokens")), cache_write_tokens=_count(c.get("cache_write_tokens")),
                  latency_s=_num(c.get("latency_s")), cached=bool(c.get("cache_hit")),
                  raw_reply=str(c.get("raw_reply") or "")[:100_000])
        for c in calls)
    return {"step": step, "group_index": index, "group_id": group.pk if group else None, **record,
            "prompt_tokens": int(e.get("prompt_tokens") or 0),
            "completion_tokens": int(e.get("completion_tokens") or 0), "cost_usd": _num(e.get("cost_usd"))}


def _on_review_requested(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """With the review gate the run waits for a reviewer's approval; without it the runner answers at once
    with the overrides made so far (execution/runner.py). A gated run paused while its step was scored stays
    paused (a person's Pause is never dropped): the runner releases a gated step only once it is approved, and
    Resume turns the run to awaiting_review."""
    step = int(e["step"])
    if run.review_gate and step <= run.review_approved_step:  # approved before its park: it trains now
        _set_phase(run, f"step {step}: review approved; training on the reviewed rewards")
    elif run.review_gate and run.status == RunStatus.PAUSED:
        # Paused before its review began (say, seconds after the last step's approval): the pause is kept, the
        # engine holds the step at its review (the runner releases a gated step only once approved), and Resume
        # opens the review (services.runs.run_resume).
        if held_phase(run, step=step, trained=False):
            _set_phase(run, paused_before_review_phase(step), status=run.status)
    elif run.review_gate and run.status == RunStatus.RUNNING:
        _set_phase(run, f"step {step}: waiting for review", status=RunStatus.AWAITING_REVIEW)
    elif not run.review_gate:
        _set_phase(run, f"step {step}: applying overrides")
    return {"step": step, "gate": run.review_gate}


def _on_review_applied(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The advantages the step trains on, recomputed by the engine from the reviewed rewards."""
    step = int(e["step"])
    changed = 0
    for g in e.get("groups") or []:
        group = TrajectoryGroup.objects.filter(run=run, step_index=step, index=int(g.get("group_index", -1))).first()
        if group is None:
            continue
        advantages = list(g.get("advantages") or [])
        group.skipped = bool(g.get("skipped"))
        group.save(update_fields=["skipped"])
        for t in group.trajectories.all():
            if t.index < len(advantages) and _num(advantages[t.index]) != t.advantage:
                t.advantage = _num(advantages[t.index])
                t.save(update_fields=["advantage"])
                changed += 1
    if held := held_phase(run, step=step, trained=False):  # a paused engine holds here, before training
        _set_phase(run, held, status=run.status)
    else:
        _set_phase(run, f"step {step}: training on the reviewed rewards")
    return {"step": step, "changed_advantages": changed}


def _on_train_step(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    step = int(e["step"])
    _set_phase(run, f"step {step}: training")
    return {"step": step, "metrics": e.get("metrics") or {}}


def _on_checkpoint_saved(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    step = int(e["step"])
    checkpoint, _ = Checkpoint.objects.update_or_create(
        run=run, step_index=step, defaults={"path": str(e.get("path", "")), "adapter_name": str(e.get("adapter_name", ""))}
    )
    _set_phase(run, f"step {step}: checkpoint saved")
    return {"step": step, "checkpoint_id": checkpoint.pk, "adapter_name": checkpoint.adapter_name}


def _criteria_means(run: Run, step: int) -> dict[str, float]:
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for criteria in Trajectory.objects.filter(group__run=run, group__step_index=step).values_list("criteria", flat=True):
        for name, value in (criteria or {}).items():
            if _num(value) is not None:
                sums[name] += float(value)
                counts[name] += 1
    return {name: sums[name] / counts[name] for name in sorted(sums)}


def _on_step_finished(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    step = int(e["step"])
    metrics = e.get("metrics") or {}
    calls = JudgeCall.objects.filter(run=run, group__step_index=step)
    costs = list(calls.filter(cached=False).values_list("cost_usd", flat=True))  # cache hits cost nothing
    cost = None if not calls.exists() or any(c is None for c in costs) else float(sum(costs))
    Step.objects.update_or_create(run=run, index=step, defaults={"metrics": metrics, "judge_cost_usd": cost})
    status = {} if run.status != RunStatus.AWAITING_REVIEW else {"status": RunStatus.RUNNING}
    if held := held_phase(run, step=step, trained=True):  # a paused engine holds here, before the next step
        status = {"status": run.status}  # (given, so the phase is written)
    # A step trained: its judge answered, so an outage it waited for is over.
    _set_phase(run, held or f"step {step} finished", steps_done=max(run.steps_done, step), judge_down_since=None, **status)
    return {"step": step, "metrics": metrics, "judge_cost_usd": cost, "criteria_means": _criteria_means(run, step)}


def _on_run_held(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The engine holds for a pause: the run stops saying "pausing", wherever the pause met the engine (between
    two steps' events too: during a held-out evaluation, say)."""
    step, trained = int(e["step"]), bool(e.get("trained"))
    if held := held_phase(run, step=step, trained=trained):
        _set_phase(run, held, status=run.status)
    return {"step": step, "trained": trained}


def _on_run_finished(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    status = RunStatus.CANCELLED if e.get("status") == "cancelled" else RunStatus.COMPLETED
    if run.status in ACTIVE_STATUSES:
        _set_phase(run, "", status=status, finished_at=timezone.now())
    return {"status": str(e.get("status")), "steps_done": int(e.get("steps_done", run.steps_done))}


def _on_run_failed(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    error = text_for_people(str(e.get("error") or "the engine failed without a message"),
                            paths=worker_paths(run.config or {}, runs_dir=str(settings.STUDIO_RUNS_DIR)))
    if run.status in ACTIVE_STATUSES:
        _set_phase(run, "", status=RunStatus.FAILED, error=error, finished_at=timezone.now())
    return {"step": int(e.get("step", -1)), "error": error[:4000]}


def _on_rollouts_wanted(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """An external agent's step is open: kept (scenarios without references, the adapter, the deadline), as the
    rollouts API reads it from here (selectors/external.py); the run's endpoint forwards to `base_url`."""
    step = int(e["step"])
    groups = [g for g in e.get("groups") or [] if isinstance(g, dict)]
    # The event is what the engine printed: its address is recorded only where this worker's settings put the
    # run's server, else nothing is (the endpoint then answers that the run is not serving, and says why here).
    address = str(e.get("base_url") or "")[:500]
    if problem := engine_address_problem(config=run.config or {}, base_url=address):
        log.warning("run %s: the engine's server address is not recorded: %s", run.pk, problem)
        address = ""
    waiting = f"step {step}: waiting for {len(groups)} group{'s' if len(groups) != 1 else ''} from your code"
    _set_phase(run, (waiting + (f" (its endpoint is off: {problem})" if problem else ""))[:200],
               external_base_url=address)
    # The server's address stays on the run: pages and their members are sent the rest, never where it listens.
    return {k: v for k, v in e.items() if k not in ("kind", "base_url")} | {"step": step, "groups": groups}


def _on_rollouts_closed(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    step = int(e["step"])
    missing = [int(i) for i in e.get("missing") or []]
    _set_phase(run, f"step {step}: " + (f"{len(missing)} group(s) did not come in time" if missing
                                        else "every group came"))
    return {"step": step, "received": [int(i) for i in e.get("received") or []], "missing": missing}


def _on_events_summarized(run: Run, e: dict[str, Any]) -> dict[str, Any]:
    """The engine's event writer fell behind this side's recording and left progress events out (the rows
    come from the events it always keeps): said in the log and in the run's event history."""
    left_out = {str(k): int(v) for k, v in (e.get("left_out") or {}).items()}
    log.warning("run %s: the engine left out %s while its events waited to be recorded", run.pk, left_out)
    return {"left_out": left_out, "max_pending": int(e.get("max_pending") or 0)}


_HANDLERS: dict[str, Callable[[Run, dict[str, Any]], dict[str, Any]]] = {
    "run_started": _on_run_started,
    "memory_planned": _on_memory_planned,
    "model_download": _on_model_download,
    "group_rolled_out": _on_group_rolled_out,
    "group_scored": _on_group_scored,
    "judge_usage": _on_judge_usage,
    "review_requested": _on_review_requested,
    "judge_unavailable": judge_unavailable_payload,  # the run waits for its judge: judge_outage.py
    "judge_budget_wait": judge_budget_wait_payload,  # ... or for its key's shared budget: judge_budget_wait.py
    "review_applied": _on_review_applied,
    "train_step": _on_train_step,
    "checkpoint_saved": _on_checkpoint_saved,
    "step_finished": _on_step_finished,
    "run_held": _on_run_held,
    "run_finished": _on_run_finished,
    "run_failed": _on_run_failed,
    "evaluation": evaluation_payload,  # held-out evaluations and monitor alerts: evaluation_events.py
    "monitor_alert": alert_payload,
    "evaluation_failed": evaluation_failed_payload,
    "events_summarized": _on_events_summarized,
    "held_out_loss": held_out_loss_payload,
    "tracker_failed": tracker_failed_payload,  # an experiment tracker stopped (issue 37): an alert, not a failure  # an SFT run's held-out conversations (issue 36)
    "rollouts_wanted": _on_rollouts_wanted,  # external rollouts (issue 21)
    "rollouts_closed": _on_rollouts_closed,
}
