"""Recorded calls of a run's endpoint (external rollouts), bounded (issue 33): a call is kept as the messages it
added to the trajectory's longest earlier call whose whole conversation it begins with (its parent), so storage
grows with the turns, not their square; `external_call_conversations` rebuilds what each call was sent, exactly,
for the submission check and for training. Calls are pruned STUDIO_EXTERNAL_CALLS_KEEP_DAYS after their run
ended (`manage.py prune_external_calls`, daily with Celery beat)."""
from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from webapp.models import ExternalCall, Run, RunStatus
from webapp.storable import storable


ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # a trajectory or client id (header X-Trajectory-Id, ...)
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CRASHED)


def digest_chain(messages: list[dict[str, Any]]) -> list[str]:
    """For each k, a digest of messages[:k + 1]; two conversations share a digest only if one's first messages
    are the other's whole."""
    chain, digest = [], b""
    for message in messages:
        canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        digest = hashlib.sha256(digest + canonical).digest()
        chain.append(digest.hex())
    return chain


def _choice_record(choice: dict[str, Any]) -> dict[str, Any]:
    """A sampled answer as assemble_trajectory reads it: the message, its token ids and their log-probs."""
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return {"message": choice.get("message") or {}, "token_ids": choice.get("token_ids"),
            "logprobs": [item.get("logprob") for item in content] if isinstance(content, list) else None,
            "finish_reason": choice.get("finish_reason")}


def external_call_record(*, run: Run, trajectory_key: str, step: int, messages: list[dict[str, Any]],
                         tools: list[dict[str, Any]] | None, completion: dict[str, Any]) -> ExternalCall:
    """Stores a call: `messages` and `tools` as the server was sent them (the endpoint cleaned them), the answer's
    choices. Only the messages after its parent's are written."""
    if not ID_PATTERN.match(trajectory_key or ""):
        raise ValidationError({"X-Trajectory-Id": ["X-Trajectory-Id must be 1 to 64 letters, digits, '_', '.' or "
                                                   "'-'"]})
    messages = storable(messages)
    chain = digest_chain(messages)
    parent = (ExternalCall.objects.filter(run=run, trajectory_key=trajectory_key, digest__in=chain)
              .order_by("-length", "-id").only("id", "length").first())
    start = parent.length if parent is not None else 0
    usage = completion.get("usage") or {}
    return ExternalCall.objects.create(
        run=run, trajectory_key=trajectory_key, step=step, parent=parent, messages=messages[start:],
        length=len(messages), digest=chain[-1] if chain else "", tools=storable(tools),
        model=storable(str(completion.get("model") or "")[:300]),
        choices=storable([_choice_record(c) for c in completion.get("choices") or [] if isinstance(c, dict)]),
        completion_tokens=int(usage.get("completion_tokens") or 0))


def external_call_conversations(calls: list[ExternalCall]) -> list[dict[str, Any]]:
    """The calls (oldest first, of one trajectory) in the shape training.rl.external.assemble_trajectory reads, each
    with every message it was sent, rebuilt from its parents."""
    sent: dict[int, list[dict[str, Any]]] = {}
    out = []
    for call in calls:
        before = sent.get(call.parent_id, []) if call.parent_id is not None else []
        if call.parent_id is not None and call.parent_id not in sent:
            raise ValueError(f"recorded call {call.pk} continues call {call.parent_id}, which is not among its "
                             "trajectory's calls")
        sent[call.pk] = [*before, *call.messages]
        out.append({"model": call.model, "request": {"messages": sent[call.pk], "tools": call.tools},
                    "choices": call.choices, "completion_tokens": call.completion_tokens})
    return out


def external_calls_prune(*, now: datetime | None = None) -> int:
    """Deletes the recorded calls of runs that ended more than STUDIO_EXTERNAL_CALLS_KEEP_DAYS ago (an ended run
    trains nothing more; its groups and trajectories stay). Returns how many calls went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.STUDIO_EXTERNAL_CALLS_KEEP_DAYS)
    ended = Run.objects.filter(status__in=ENDED, finished_at__lt=cutoff).values("pk")
    _, by_model = ExternalCall.objects.filter(run__in=ended).delete()
    return by_model.get(ExternalCall._meta.label, 0)
