"""What happens to a step that has not trained yet: the one answer that answer cards, banners, the audit trail and
the API all give (issue 48 item 5). A pure function of the run's row: no queries, so models may use it too.

The rules it states are the engine's and the runner's (docs/webapp.md "How a run flows", "A redone step keeps
its human scores"): a live run trains the step on its effective rewards; a run awaiting review trains it once
approved; a run whose engine stopped (parked paused, failed, crashed, queued again) rolls the steps after its last
checkpoint out again on resume, except the step its engine kept (approved at its review, or waiting for its
judge: execution/parking.kept_step_settle); a paused run with an engine trains it if resumed before a queued run
parks it; a cancelled run never trains it.
"""
from __future__ import annotations

from typing import Literal

from webapp.models.runs import PARKED, Run, RunStatus

Fate = Literal["train", "approve", "redo", "redo_if_parked", "never"]


def step_kept(run: Run, step: int) -> bool:
    """The step the last engine kept goes on without a new rollout (execution/parking.kept_step_settle)."""
    return step > run.steps_done and (step <= run.review_approved_step or run.judge_down_since is not None)


def step_fate(run: Run, step: int) -> Fate:
    """What Resume, Approve or the live engine will do with `step` of `run`, which has not trained."""
    status = run.status
    if status in (RunStatus.CANCELLED, RunStatus.COMPLETED):
        return "never"
    if status == RunStatus.AWAITING_REVIEW:
        return "train" if step <= run.review_approved_step else "approve"
    if status in (RunStatus.FAILED, RunStatus.CRASHED):
        return "redo"  # a stopped engine kept nothing for this: the resumed one starts from the checkpoint
    if status == RunStatus.QUEUED or (status == RunStatus.PAUSED and run.worker == PARKED):
        return "train" if step_kept(run, step) else "redo"
    if status == RunStatus.PAUSED:
        return "train" if run.judge_down_since is not None else "redo_if_parked"
    return "train"


def step_fate_note(run: Run, step: int, reward: float) -> str:
    """One sentence for an answer of `step` whose effective reward is `reward` and whose step has not trained."""
    fate = step_fate(run, step)
    if fate == "approve":
        return f"not trained yet: waits for review; Approve trains step {step} on {reward:.3f}"
    if fate == "redo":
        return (f"not trained: Resume rolls step {step} out again, so {reward:.3f} does not train (a human score "
                "carries over only to an identical new answer)")
    if fate == "redo_if_parked":
        return (f"not trained yet: step {step} trains on {reward:.3f} if resumed before a queued run parks this "
                "run; after a park, Resume rolls it out again")
    if fate == "never":
        return "never trained: the run ended before this step trained"
    return f"not trained yet: the step will train on {reward:.3f}"


def override_pending_note(run: Run, step: int) -> str:
    """The audit trail's word for a human score on a step that has not trained (ScoreOverride.training_note)."""
    fate = step_fate(run, step)
    if fate == "approve":
        return "pending: the step waits for review; Approve trains it on this score"
    if fate == "redo":
        return "pending: Resume rolls the step out again; the score is carried only to an identical answer"
    if fate == "redo_if_parked":
        return "pending: trains if the run is resumed before a queued run parks it; after a park it is redone"
    if fate == "never":
        return "never trained: the run ended before the step trained"
    return "pending: the step has not trained yet and will train on it"


# A person's Pause takes effect at the engine's next phase boundary: before a step trains (after its scoring and
# review) or after it trained. Until the engine reaches it the run is paused but still working, and says so.
PAUSING = "pausing"


def pause_phase(run: Run) -> str:
    """The phase a person's Pause sets: where the engine will stop. Step N has had its rewards handed over
    (`reviewed_through_step`) when it is training: the engine then stops after it; otherwise after its scoring,
    before it trains (an SFT run stops between its steps)."""
    step = run.steps_done + 1
    if run.kind == "sft" or step <= run.reviewed_through_step:
        return f"{PAUSING} after step {step}: the engine finishes training it, then stops"
    return f"{PAUSING} before step {step} trains: the engine finishes its scoring, then stops"


def held_phase(run: Run, *, step: int, trained: bool) -> str | None:
    """The phase once the engine reached its boundary after a person's Pause (None: it was not pausing)."""
    if run.status != RunStatus.PAUSED or not run.phase.startswith(PAUSING):
        return None
    if not trained:
        return f"paused before step {step} trains"
    return f"paused after step {step}" if step else "paused before step 1"


# A gated run paused before its step's review began: its engine holds the step, and Resume opens the review. Once
# parked (the engine stopped), Resume rolls the step out again instead, and the phase must stop promising it.
OPENS_REVIEW = ": Resume opens it"


def paused_before_review_phase(step: int) -> str:
    return f"paused before step {step}'s review{OPENS_REVIEW}"


def status_label(run: Run) -> str:
    """The run's status as the header shows it: "Pausing" until the engine reached its boundary."""
    if run.status == RunStatus.PAUSED and (run.phase or "").startswith(PAUSING):
        return "Pausing"
    return run.get_status_display()
