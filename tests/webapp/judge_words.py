"""A scored group whose judge explains itself as LLM judges do, by its own shuffled numbers, lists and ranges
included ("Compared with attempts 1 and 3…", "Responses 1-3…"), stored as the engine stores it (the judge call's
presentation order and raw reply beside the trajectories). Shared by the label tests of pages, API and export."""
from __future__ import annotations

import json
import re

from webapp.live.ingest import run_event_ingest
from webapp.models import Run, Trajectory

# The judge saw the rollouts in the order 2, 0, 3, 1: its 1 is C, 2 is A, 3 is D, 4 is B.
ORDER = [2, 0, 3, 1]
ANSWERS = ["Refunds take a while.", "No idea, sorry.", "Refunds within thirty days of delivery, per the policy.",
           "You can probably get a refund."]
JUDGE_SAID = [
    "Compared with attempts 1 and 3, this answer (answer 2) skips the refund window.",
    "Responses 1-3 all beat it; the fourth response is the weakest.",
    "Best of the group: unlike #2 and #4 it cites the thirty-day policy.",
    "Close to trajectory 1; trajectories 2 and 4 are vaguer, and attempts 1 to 3 are polite.",
]
PEOPLE_READ = [
    "Compared with attempts C and D, this answer (answer A) skips the refund window.",
    "Responses A, C and D all beat it; response B is the weakest.",
    "Best of the group: unlike A and B it cites the thirty-day policy.",
    "Close to trajectory C; trajectories A and B are vaguer, and attempts A, C and D are polite.",
]
SCORES = [0.4, 0.1, 0.9, 0.6]
# What a person must never read: a judge noun (or "#") followed by a number.
UNTRANSLATED = re.compile(r"\b(?:attempt|trajector(?:y|ies)|response|answer|candidate)s?\s*(?:#|id\s*)?\d+\b|#\d",
                          re.I)


def judged_group(run: Run, *, step: int = 1) -> list[Trajectory]:
    """Ingests the group as the engine reports it; returns its trajectories in rollout order."""
    records = [{"scenario_id": "refunds", "messages": [{"role": "user", "content": "Can I get a refund?"},
                                                       {"role": "assistant", "content": a}],
                "reward": s, "judge_score": s, "explanation": e, "criteria": {}, "metadata": {}, "advantage": 0.0}
               for a, s, e in zip(ANSWERS, SCORES, JUDGE_SAID)]
    run_event_ingest(run_id=run.id, event={"kind": "group_scored", "step": step, "group_index": 0,
                                           "scenario_id": "refunds", "trajectories": records,
                                           "reward_mean": sum(SCORES) / 4, "reward_std": 0.3, "skipped": False})
    trajectories = list(Trajectory.objects.filter(group__run=run, group__step_index=step).order_by("index"))
    reply = json.dumps({"scores": [{"trajectory_id": str(p + 1), "score": SCORES[i], "explanation": JUDGE_SAID[i]}
                                   for p, i in enumerate(ORDER)]})
    trajectories[0].metadata = {"judge_calls": [{"order": ORDER, "raw_reply": reply, "pass_index": 0}]}
    trajectories[0].save(update_fields=["metadata"])
    return trajectories
