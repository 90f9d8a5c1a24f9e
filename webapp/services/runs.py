"""The run state machine: queued → running ⇄ paused → awaiting_review → completed | failed | cancelled | crashed.

Every transition is a conditional UPDATE on the current status, so two workers (or a worker and a click) can
never both win; each accepted transition is also appended as a `status` RunEvent for the live page.
"""
from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from webapp.execution.dispatch import RUN_EXECUTE, work_enqueue
from webapp.live.ingest import run_status_publish
from webapp.limits import limit_check
from webapp.queue_policy import claim_order, project_capped, queue_read
from webapp.models import (Agent, Checkpoint, DatasetVersion, JudgeConfig, Project, Role, RubricVersion, Run,
                           RunStatus, ScenarioSet)
from webapp.models.runs import ACTIVE_STATUSES, PARKED
from webapp.review_state import OPENS_REVIEW, pause_phase
from webapp.run_policy import text_for_people, worker_paths
from webapp.selectors.prompt_budget import launch_tools
from webapp.selectors.review import run_review_waiting_step
from webapp.selectors.usage import checkpoint_bytes_usage
from webapp.services.access import require_role
from webapp.services.judge_probe import judge_config_reachable_check
from webapp.services.mcp_servers import mcp_agent_run_secrets
from webapp.services.run_config import run_config_build, run_launch_check
from webapp.services.sft_runs import sft_run_config
from webapp.services.trackers import run_trackers_chosen, run_trackers_config, trackers_available
from webapp.wording import with_article

log = logging.getLogger(__name__)


DUPLICATE_WINDOW = timedelta(minutes=10)


class DuplicateLaunch(ValidationError):
    """The same user launched an identical run moments ago (the browser's Back refills the form with a fresh
    one-time token, so the token cannot tell). `run` is that run; the caller may launch anyway."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"you launched an identical run, '{run.name}', {_ago(run)}; "
                         "open it, or launch this one anyway")
        self.run = run


def _ago(run: Run) -> str:
    minutes = int((timezone.now() - run.created_at).total_seconds() // 60)
    return "less than a minute ago" if minutes < 1 else f"{minutes} minute{'s' if minutes != 1 else ''} ago"


def _recent_identical(*, user, project: Project, config: dict[str, Any], review_gate: bool,
                      parent_checkpoint: Checkpoint | None) -> Run | None:
    if not getattr(user, "is_authenticated", False):
        return None
    same = {k: v for k, v in config.items() if k != "output_dir"}  # output_dir is new for every launch
    recent = project.runs.filter(created_by=user, created_at__gte=timezone.now() - DUPLICATE_WINDOW,
                                 review_gate=review_gate, parent_checkpoint=parent_checkpoint).order_by("-id")
    for run in recent[:20]:
        if {k: v for k, v in run.config.items() if k != "output_dir"} == same:
            return run
    return None


def _same_project(project: Project, **objects: Any) -> None:
    for field, obj in objects.items():
        owner = obj.rubric.project_id if isinstance(obj, RubricVersion) else getattr(obj, "project_id", None)
        if obj is not None and owner != project.id:
            raise ValidationError({field: ["choose one from this project"]})


def run_launch(*, user, project: Project, name: str, agent: Agent, scenario_set: ScenarioSet | None,
               rubric_version: RubricVersion | None = None, judge_config: JudgeConfig | None = None,
               steps: int, group_size: int, groups_per_step: int, learning_rate: float, seed: int = 0,
               overrides: dict[str, Any] | None = None, review_gate: bool = False,
               parent_checkpoint: Checkpoint | None = None, launch_token: str = "",
               refuse_duplicate: bool = False, kind: str = "grpo", dataset_version: DatasetVersion | None = None,
               sft: dict[str, Any] | None = None, trackers: list[str] | None = None) -> Run:
    """`overrides`: a person's training settings (webapp/run_policy.py's allow-list; any other key is refused,
    naming it). `review_gate`: wait for a reviewer after each step's scoring. `parent_checkpoint`: a fork,
    starting from that checkpoint of this project (its path, the engine's init_checkpoint, is read on the
    server, never sent). `launch_token`: the launch form's one-time token;
    a second launch with the same token returns the first run instead of starting a duplicate.
    `refuse_duplicate`: raise DuplicateLaunch when this user launched an identical run in the last
    DUPLICATE_WINDOW (the launch form sets it unless the person chose "launch anyway").
    `kind="sft"`: teach from `dataset_version` with the `sft` options (services/sft_runs.py) instead of
    reinforcing; the scenario set's validation scenarios then serve the held-out win rate only.
    `trackers`: the experiment trackers (by name, among those the deployment offers) the run reports to."""
    require_role(user=user, project=project, role=Role.EDITOR)
    launch_token = (launch_token or "")[:64]
    if launch_token and (existing := project.runs.filter(launch_token=launch_token).first()) is not None:
        return existing
    if parent_checkpoint is not None and parent_checkpoint.run.project_id != project.id:
        raise ValidationError({"parent_checkpoint": ["choose a checkpoint of a run in this project"]})
    _same_project(project, agent=agent, scenario_set=scenario_set, rubric_version=rubric_version,
                  judge_config=judge_config)
    # A run writes checkpoints as it trains, their size unknown now: refused once the project's reach its limit.
    limit_check(limit_name="checkpoint_bytes", usage=checkpoint_bytes_usage(project=project), adding=0)
    # A fork keeps its parent's frozen MCP server (run_config_build), secrets included; a new run freezes the
    # agent's server now.
    secrets = parent_checkpoint.run.secrets_encrypted if parent_checkpoint is not None \
        else mcp_agent_run_secrets(agent=agent)
    name = name.strip()
    if not name or len(name) > 100:
        raise ValidationError({"name": ["give the run a name of at most 100 characters"]})
    config = run_config_build(name=name, agent=agent, scenario_set=scenario_set, rubric_version=rubric_version,
                              judge=judge_config, steps=steps, group_size=group_size,
                              groups_per_step=groups_per_step, learning_rate=learning_rate, seed=seed,
                              overrides=overrides, parent=parent_checkpoint, kind=kind)
    if kind == "sft":
        if review_gate:
            raise ValidationError({"review_gate": ["an SFT run scores nothing, so there is nothing to review"]})
        config = sft_run_config(config=config, project=project, dataset_version=dataset_version, sft=sft)
    elif kind != "grpo":
        raise ValidationError({"kind": ["choose grpo (reinforce) or sft (teach)"]})
    elif sft or dataset_version is not None:
        raise ValidationError({"kind": ["a dataset and SFT options are for kind sft (teach) runs"]})
    if (section := run_trackers_config(chosen=trackers or [])) is not None:
        config["trackers"] = section
    run_launch_check(config=config, judge=judge_config,
                     tools=launch_tools(agent=agent) if parent_checkpoint is None else None)
    if refuse_duplicate and (twin := _recent_identical(user=user, project=project, config=config,
                                                       review_gate=review_gate,
                                                       parent_checkpoint=parent_checkpoint)) is not None:
        raise DuplicateLaunch(twin)
    if judge_config is not None:  # last: the other checks cost nothing
        judge_config_reachable_check(user=user, judge=judge_config)
    try:
        with transaction.atomic():
            run = Run.objects.create(
                project=project, name=name, agent=agent, agent_version=agent.version, scenario_set=scenario_set,
                rubric_version=rubric_version,
                judge_config=judge_config, config=config, total_steps=config["steps"] if kind == "grpo" else 0,
                dataset_version=dataset_version if kind == "sft" else None,
                created_by=user if getattr(user, "is_authenticated", False) else None,
                phase="waiting for a worker", review_gate=review_gate, launch_token=launch_token,
                parent_checkpoint=parent_checkpoint, parent_run=parent_checkpoint.run if parent_checkpoint else None,
                secrets_encrypted=secrets,
            )
            run_status_publish(run_id=run.id)
            run_enqueue(run=run)
    except IntegrityError:  # the same form, submitted twice at once: the other request created the run
        return project.runs.get(launch_token=launch_token)
    return run


def run_fork(*, user, checkpoint: Checkpoint, name: str, rubric_version: RubricVersion | None,
             judge_config: JudgeConfig | None, steps: int, learning_rate: float | None = None,
             overrides: dict[str, Any] | None = None, review_gate: bool = False,
             scenario_set: ScenarioSet | None = None) -> Run:
    """A new run from `checkpoint`'s adapter with the parent's agent, scenarios (or `scenario_set`'s) and sizes,
    and a changed rubric, judge or training settings. The parent's model, prompt, environment, sampling and
    adapter shape come from its frozen config (run_config_build); its group sizes and learning rate unless
    `overrides` change them."""
    parent = checkpoint.run
    grpo = parent.config.get("grpo", {})
    return run_launch(
        user=user, project=parent.project, name=name, agent=parent.agent,
        scenario_set=scenario_set or parent.scenario_set,
        rubric_version=rubric_version, judge_config=judge_config, steps=steps,
        group_size=grpo.get("group_size", 4), groups_per_step=grpo.get("groups_per_step", 2),
        learning_rate=learning_rate or grpo.get("learning_rate", 1e-5), seed=parent.config.get("seed", 0),
        overrides=overrides, review_gate=review_gate, parent_checkpoint=checkpoint,
        # a fork reports where its parent did, as far as the site still offers it
        trackers=[t for t in run_trackers_chosen(config=parent.config) if t in trackers_available()])


def run_enqueue(*, run: Run) -> None:
    """Hands the run to the executor once the transaction commits (a worker must see the row)."""
    def _send() -> None:
        Run.objects.filter(pk=run.id, status=RunStatus.QUEUED).update(enqueued_at=timezone.now())
        work_enqueue(name=RUN_EXECUTE, object_id=run.id)

    transaction.on_commit(_send)


def _transition(run_id: int, from_statuses: tuple[str, ...], **changes: Any) -> bool:
    with transaction.atomic():
        updated = Run.objects.filter(pk=run_id, status__in=from_statuses).update(**changes)
        if updated:
            run_status_publish(run_id=run_id)
    return bool(updated)


def _require_control(user, run: Run) -> None:
    if user is not None:
        require_role(user=user, project=run.project, role=Role.EDITOR)


def run_pause(*, user, run: Run) -> None:
    """running → paused; the phase says where the engine will stop ("pausing after step N") until it does
    (webapp/review_state.py; the ingest says "paused after step N" once it did)."""
    _require_control(user, run)
    fresh = Run.objects.filter(pk=run.id).first() or run
    if not _transition(run.id, (RunStatus.RUNNING,), status=RunStatus.PAUSED, phase=pause_phase(fresh)):
        raise ValidationError(f"{with_article(run.get_status_display().lower())} run cannot be paused")


def run_resume(*, user, run: Run) -> None:
    """Resumes a paused run in place, or re-queues a parked, crashed or failed one from its last checkpoint. A
    gated run whose engine holds a scored step at its review (paused before the review began) goes to its
    review: the step trains only once a reviewer approves it."""
    _require_control(user, run)
    if _requeue_parked(run):
        return
    with transaction.atomic():  # under the row lock the ingest takes: a review request cannot slip in between
        locked = Run.objects.select_for_update().filter(pk=run.id, status=RunStatus.PAUSED).first()
        review_step = run_review_waiting_step(run=locked) if locked is not None else None
        if review_step is not None and _transition(run.id, (RunStatus.PAUSED,), status=RunStatus.AWAITING_REVIEW,
                                                   phase=f"step {review_step}: waiting for review"):
            return
        if _transition(run.id, (RunStatus.PAUSED,), status=RunStatus.RUNNING, phase="resuming"):
            return
    if _transition(run.id, (RunStatus.CRASHED, RunStatus.FAILED), status=RunStatus.QUEUED, error="",
                   cancel_requested=False, finished_at=None, phase="waiting for a worker (resume from checkpoint)"):
        run_enqueue(run=run)
        return
    raise ValidationError(f"{with_article(run.get_status_display().lower())} run cannot be resumed")


def run_cancel(*, user, run: Run) -> None:
    _require_control(user, run)
    if _transition(run.id, (RunStatus.QUEUED, RunStatus.CRASHED), status=RunStatus.CANCELLED,
                   finished_at=timezone.now(), phase=""):
        return
    with transaction.atomic():  # a parked run has no engine to report run_finished(cancelled)
        parked = Run.objects.filter(pk=run.id, status__in=(RunStatus.PAUSED, RunStatus.AWAITING_REVIEW), worker=PARKED)
        if parked.update(status=RunStatus.CANCELLED, finished_at=timezone.now(), phase=""):
            run_status_publish(run_id=run.id)
            return
    # A live run stops at its next phase boundary; the engine then reports run_finished(cancelled).
    if not _transition(run.id, ACTIVE_STATUSES, cancel_requested=True, phase="cancelling at the next phase boundary"):
        raise ValidationError(f"{with_article(run.get_status_display().lower())} run cannot be cancelled")


# Parking: a paused run holds its worker's only run slot for as long as it stays paused. When another run waits
# in the queue, the runner stops the paused run's engine and "parks" the run: still paused, with no worker
# (worker=PARKED), so the reaper leaves it alone; Resume sends it back to the queue, to continue from its last
# checkpoint, and Cancel ends it at once. A run awaiting review parks the same way (approval re-queues it), and
# a run whose judge is down parks by itself (paused; queued again after a backoff, or by Resume).
def runs_waiting(*, besides: int) -> bool:
    """Whether a run other than `besides` waits in the queue for a worker."""
    return Run.objects.filter(status=RunStatus.QUEUED).exclude(pk=besides).exists()


def review_parked_phase(phase: str) -> str:
    """What a run parked at its review says: "step 3: waiting for review; its worker is free"."""
    step = phase.split(":", 1)[0] if phase.startswith("step ") else ""
    return f"{step + ': ' if step else ''}waiting for review; its worker is free"


def run_park(*, run_id: int, worker: str) -> bool:
    """Called once `worker` has stopped the engine of its paused run, or of one awaiting review: parks the run
    (True). A run resumed (or approved) while its engine stopped goes back to the queue instead."""
    step = Checkpoint.objects.filter(run_id=run_id).order_by("-step_index").values_list("step_index", flat=True).first()
    where = f"from the step {step} checkpoint" if step else "from the beginning (no checkpoint yet)"
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, worker=worker).first()
        if run is None:
            return False
        # Steps after the last checkpoint are rolled out again: one whose rewards were handed over but that did
        # not train is open to review again, so a human score given meanwhile is not called a label.
        Run.objects.filter(pk=run_id, reviewed_through_step__gt=step or 0).update(reviewed_through_step=step or 0)
        if run.status == RunStatus.PAUSED:
            reason = run.phase.removesuffix(OPENS_REVIEW) if run.phase.startswith("paused") else "paused"
            note = f"; its engine stopped to let a queued run use the worker: resume continues {where}"
            # A person's pause wins over a judge outage's own retry: it waits for Resume.
            Run.objects.filter(pk=run_id).update(worker=PARKED, phase=(reason[:200 - len(note)] + note)[:200],
                                                 judge_retry_at=None)
            run_status_publish(run_id=run_id)
            return True
        if run.status == RunStatus.AWAITING_REVIEW:
            # Its engine kept the scored step (training/parking): approval re-queues it to train those groups.
            Run.objects.filter(pk=run_id).update(worker=PARKED, phase=review_parked_phase(run.phase))
            run_status_publish(run_id=run_id)
            return True
        if run.status == RunStatus.RUNNING and run.judge_retry_at is not None:
            # Its engine stopped to wait for the judge (live/judge_outage.py): paused and parked, with the step
            # kept, until runs_judge_retry_due queues it again (a message delayed until then wakes a worker).
            Run.objects.filter(pk=run_id).update(status=RunStatus.PAUSED, worker=PARKED)
            run_status_publish(run_id=run_id)
            delay = max(0.0, (run.judge_retry_at - timezone.now()).total_seconds())
            transaction.on_commit(lambda: work_enqueue(name=RUN_EXECUTE, object_id=run_id, delay_s=delay))
            return True
        if run.status == RunStatus.RUNNING:
            Run.objects.filter(pk=run_id).update(status=RunStatus.QUEUED, worker="",
                                                 phase=f"waiting for a worker (resume {where})")
            run_status_publish(run_id=run_id)
            run_enqueue(run=run)
    return False


def _requeue_parked(run: Run) -> bool:
    with transaction.atomic():
        if not Run.objects.filter(pk=run.id, status=RunStatus.PAUSED, worker=PARKED).update(
                status=RunStatus.QUEUED, cancel_requested=False, phase="waiting for a worker (resume from checkpoint)"):
            return False
        run_status_publish(run_id=run.id)
        run_enqueue(run=run)
    return True


def run_claim(*, run_id: int, worker: str) -> bool:
    """queued → running for exactly one worker; a redelivered or duplicate task finds nothing to claim."""
    now = timezone.now()
    return _transition(run_id, (RunStatus.QUEUED,), status=RunStatus.RUNNING, worker=worker, heartbeat_at=now,
                       started_at=now, attempts=F("attempts") + 1, error="", phase="starting the engine")


def runs_judge_retry_due(*, now=None) -> list[int]:
    """Queues again every run parked to wait for its judge whose time to ask again has come; their ids. Its
    lower id puts such a run ahead of runs launched after it; its engine takes the kept step up and asks the
    judge for the groups it could not score (a judge still down parks it again, for longer)."""
    now = now or timezone.now()
    due = []
    for run_id in Run.objects.filter(status=RunStatus.PAUSED, worker=PARKED, judge_retry_at__lte=now) \
            .order_by("id").values_list("id", flat=True):
        with transaction.atomic():
            if Run.objects.filter(pk=run_id, status=RunStatus.PAUSED, worker=PARKED, judge_retry_at__lte=now).update(
                    status=RunStatus.QUEUED, worker="", judge_retry_at=None,
                    phase="waiting for a worker to ask the judge again"):
                run_status_publish(run_id=run_id)
                due.append(run_id)
    return due


def run_claim_next(*, worker: str) -> int | None:
    """Claims the queued run the fair queue puts first for `worker` (webapp/queue_policy.py: resuming runs ahead
    of later launches, then the project's priority, then launch order; a project at its cap of runs in flight
    waits); its id, or None when nothing may start. Any free worker slot takes that run, whichever task message
    woke it, so a run never waits behind a later launch, nor for a lost message's re-send
    (runs_requeue_stranded). A run that waited for its judge long enough joins the queue first
    (runs_judge_retry_due)."""
    runs_judge_retry_due()
    while True:
        candidates = claim_order(*queue_read())[:20]
        if not candidates:
            return None
        for run_id in candidates:
            if _claim_within_cap(run_id=run_id, worker=worker):
                return run_id
        # every candidate was claimed by another worker (or its project reached its cap) meanwhile: look again


def _claim_within_cap(*, run_id: int, worker: str) -> bool:
    """run_claim, with the project's row locked while its runs in flight are counted: two workers at once cannot
    both take its last place."""
    if not settings.STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT:
        return run_claim(run_id=run_id, worker=worker)
    with transaction.atomic():
        project_id = Run.objects.filter(pk=run_id).values_list("project_id", flat=True).first()
        list(Project.objects.select_for_update().filter(pk=project_id).values_list("pk", flat=True))
        holding = Run.objects.filter(project_id=project_id, status__in=ACTIVE_STATUSES).exclude(worker=PARKED)
        if project_capped(project_id, Counter({project_id: holding.count()})):
            return False
        return run_claim(run_id=run_id, worker=worker)


def run_heartbeat(*, run_id: int, worker: str) -> None:
    Run.objects.filter(pk=run_id, worker=worker, status__in=ACTIVE_STATUSES).update(heartbeat_at=timezone.now())


def run_control_state(*, run_id: int, worker: str) -> str:
    """What the engine's control.state() should answer now: run | pause | cancel, or `lost` when the run is no
    longer this worker's (the reaper marked it crashed, or a resume handed it to another worker)."""
    row = Run.objects.filter(pk=run_id).values("status", "cancel_requested", "worker").first()
    if row is not None and (row["worker"] != worker or row["status"] == RunStatus.CRASHED):
        return "lost"
    if row is None or row["cancel_requested"] or row["status"] == RunStatus.CANCELLED:
        return "cancel"
    return "pause" if row["status"] == RunStatus.PAUSED else "run"


def run_finish_after_engine(*, run_id: int, worker: str, exit_code: int, log_tail: str) -> None:
    """The engine process has exited: a run it left unfinished did not end cleanly, so say so (unless the run
    has meanwhile passed to another worker, whose engine is the one that counts now)."""
    run = Run.objects.get(pk=run_id)
    if run.status not in ACTIVE_STATUSES or run.worker != worker:
        return
    if run.cancel_requested:
        _transition(run_id, ACTIVE_STATUSES, status=RunStatus.CANCELLED, finished_at=timezone.now(), phase="")
        return
    error = f"the engine exited with code {exit_code} without finishing the run"
    if log_tail.strip():  # shown to every member: the worker's paths in it are named, not spelled out
        error += "; last output:\n" + text_for_people(log_tail.strip(), paths=worker_paths(
            run.config or {}, runs_dir=str(settings.STUDIO_RUNS_DIR)))
    _transition(run_id, ACTIVE_STATUSES, status=RunStatus.FAILED, error=error, finished_at=timezone.now(), phase="")


def run_judge_budget_check(*, run_id: int) -> bool:
    """Pauses a running run once its judge calls have cost its judge's budget (a per-run limit); True when it
    did. Calls of unpriced models count nothing: their cost is unknown, so no budget can hold them back."""
    run = Run.objects.select_related("judge_config").get(pk=run_id)
    budget = run.judge_config.budget_usd if run.judge_config else None
    if budget is None or run.status != RunStatus.RUNNING:
        return False
    # Cache hits were never sent, so never paid: they do not count against the budget.
    spent = run.judge_calls.filter(cached=False).aggregate(spent=Sum("cost_usd"))["spent"] or 0.0
    if spent < float(budget):
        return False
    return _transition(run_id, (RunStatus.RUNNING,), status=RunStatus.PAUSED,
                       phase=f"paused: the judge budget of ${budget} is spent (${spent:.2f}); "
                             "raise it on the judge, then resume")


def run_mark_crashed(*, run_id: int, reason: str) -> bool:
    return _transition(run_id, ACTIVE_STATUSES, status=RunStatus.CRASHED, error=reason, phase="",
                       finished_at=timezone.now())


def runs_requeue_stranded(*, now=None) -> list[int]:
    """Re-sends every run queued for longer than STUDIO_REQUEUE_AFTER_S since it was last sent; returns their
    ids. Tasks are acknowledged on receipt, so a lost or dropped message would leave the run queued forever;
    a message that was only slow meets the re-sent one at run_claim, and one of them finds nothing to claim."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.STUDIO_REQUEUE_AFTER_S)
    waiting = Run.objects.filter(status=RunStatus.QUEUED)
    stranded = waiting.filter(enqueued_at__lt=cutoff) | waiting.filter(enqueued_at=None, created_at__lt=cutoff)
    resent = []
    for run_id, sent_at in stranded.order_by("id").values_list("id", "enqueued_at"):
        # Conditional on the time read: of two reapers, one re-sends.
        if Run.objects.filter(pk=run_id, status=RunStatus.QUEUED, enqueued_at=sent_at).update(enqueued_at=now):
            log.warning("run %s was queued since %s without a worker; sending it again", run_id, sent_at)
            work_enqueue(name=RUN_EXECUTE, object_id=run_id)
            resent.append(run_id)
    return resent


def runs_reap_stale(*, now=None) -> list[int]:
    """Marks crashed every active run whose worker stopped beating, returning their ids, and re-sends runs
    stranded in the queue (runs_requeue_stranded)."""
    now = now or timezone.now()
    for run_id in runs_judge_retry_due(now=now):  # a delayed message lost with its worker: the reaper sends one
        work_enqueue(name=RUN_EXECUTE, object_id=run_id)
    runs_requeue_stranded(now=now)
    cutoff = now - timedelta(seconds=settings.STUDIO_STALE_AFTER_S)
    stale = list(Run.objects.filter(status__in=ACTIVE_STATUSES, heartbeat_at__lt=cutoff)
                 .exclude(worker=PARKED).values_list("id", "worker"))  # parked (paused or at review): no engine
    reaped = []
    for run_id, worker in stale:
        reason = (f"worker {worker or '?'} stopped sending heartbeats (none for {settings.STUDIO_STALE_AFTER_S:.0f} s);"
                  " resume to continue from the last checkpoint")
        if run_mark_crashed(run_id=run_id, reason=reason):
            log.warning("run %s crashed: %s", run_id, reason)
            reaped.append(run_id)
    return reaped
