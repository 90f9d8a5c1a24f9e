"""The engine process of one run: `python -m webapp.execution.engine_child EVENTS_FD` (started by runner.py).

A run with several training processes starts as `torchrun --standalone --nproc-per-node N -m
webapp.execution.engine_child stdout --spec FILE`: torchrun passes no other descriptor on, so rank 0 writes the
events to stdout (and redirects its own stdout prints to the log), every rank reads the spec from FILE, only
rank 0 reads stdin and reports, and the other ranks train what rank 0 sends them (training/model/gpu/distributed.py).

It never imports Django. Protocol with the parent:
- stdin, first line: {"config": RunConfig JSON, "engine": "module:function"}; later lines: {"control": state}
  (run | pause | cancel, or park: stop at the next phase boundary like a cancel, without reporting the run as
  cancelled, for the parent to park it) or {"review": {"step": N, "rewards": {"<group index>": [effective reward per trajectory, or null]}}}, the
  parent's answer to a `review_requested` event (sent at once, or after a person approved the step's review),
  or {"groups": [{"step", "group_index", "trajectories": [...]}]}, groups an external agent submitted (the
  parent sends them as they come, and all of a step not yet trained again when an engine starts).
  stdin closing means the parent died: the run is cancelled at the next phase boundary and the process exits.
- EVENTS_FD: one JSON event per line (`event.to_dict()`), written by a thread of its own (EventWriter): a
  parent that falls behind never holds a step up; progress events are then summarised.
- stdout / stderr: the engine's own log, which the parent keeps next to the checkpoints.
Torch threads are limited by the parent through OMP_NUM_THREADS, so the web process keeps a core.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import sys
import threading
import traceback
from collections import Counter, deque
from pathlib import Path
from typing import Any

from training.events import StaticControl
from training.rl.external import Inbox

PARENT_GONE_GRACE_S = 30.0


class EventWriter:
    """The engine's sink: a step never waits for the parent. Each event is serialised at once (the engine may
    change its objects afterwards) and queued; a thread of its own writes the queue to the pipe. The parent
    records every event in the database and publishes it; when that falls behind the pipe fills, and a direct
    write would stop the step until it drains. While MAX_PENDING events wait, progress-only events are left
    out and counted, and once the backlog has eased an `events_summarized` event says how many of each. The
    others carry rows the pages are built from (groups, judge calls, checkpoints, steps) and are always kept;
    the review handshake after each step's groups bounds them to about a step."""

    MAX_PENDING = 64  # a few steps' groups of the demo; enough that a healthy parent never reaches it
    SUMMARIZABLE = frozenset({"group_rolled_out"})  # the page shows them only as the run's phase

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
        self._queue: deque[str] = deque()
        self._left_out: Counter[str] = Counter()
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._drain, daemon=True, name="events")
        self._thread.start()

    def __call__(self, event: Any) -> None:
        data = event.to_dict() if hasattr(event, "to_dict") else dict(event)
        line = json.dumps(data, default=str, allow_nan=False) if _finite(data) else json.dumps(data, default=str)
        with self._ready:
            if data.get("kind") in self.SUMMARIZABLE and len(self._queue) >= self.MAX_PENDING:
                self._left_out[str(data["kind"])] += 1
                return
            self._queue.append(line)
            self._ready.notify()

    def close(self) -> None:
        """Writes what is queued, then closes the pipe (the parent reads until it closes)."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join()
        try:
            self._file.close()
        except OSError:
            pass

    def _drain(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                line = self._queue.popleft()
                note = None
                if self._left_out and len(self._queue) < self.MAX_PENDING // 2:  # the backlog has eased
                    note = json.dumps({"kind": "events_summarized", "left_out": dict(self._left_out),
                                       "max_pending": self.MAX_PENDING})
                    print(f"events: the parent fell behind; left out {dict(self._left_out)}", file=sys.stderr)
                    self._left_out.clear()
            if note:
                self._write(note)  # before the event at hand: the run's last event stays its last
            self._write(line)

    def _write(self, line: str) -> None:
        try:
            self._file.write(line + "\n")
            self._file.flush()
        except OSError:
            pass  # the parent is gone: nobody reads, and stdin closing cancels the run


def _finite(data: Any) -> bool:
    try:
        json.dumps(data, default=str, allow_nan=False)
        return True
    except ValueError:
        return False


class ReviewMailbox:
    """The parent's review answers, by step; the engine's review hook waits here for its step's answer."""

    def __init__(self) -> None:
        self._answers: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def put(self, answer: dict[str, Any]) -> None:
        with self._lock:
            self._answers[int(answer["step"])] = answer

    def take(self, step: int) -> dict[str, Any] | None:
        with self._lock:
            return self._answers.pop(step, None)


def review_hook(mailbox: ReviewMailbox, control: StaticControl):
    """The loop's ReviewHook: waits for the parent's effective rewards of this step (overrides applied) and sets
    them on the trajectories; the loop then recomputes the advantages. A cancel ends the wait."""

    async def review(step: int, groups: list[Any]) -> None:
        while (answer := mailbox.take(step)) is None:
            if control.state() == "cancel":
                return
            await asyncio.sleep(0.1)
        rewards = answer.get("rewards") or {}
        for index, group in enumerate(groups):  # the loop passes the step's groups in group-index order
            for trajectory, reward in zip(group.trajectories, rewards.get(str(index)) or []):
                if reward is not None and trajectory.reward is not None:
                    trajectory.reward = float(reward)

    return review


def _follow_control(control: StaticControl, mailbox: ReviewMailbox, parking: threading.Event,
                    inbox: Inbox) -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
            state = message.get("control")
            if isinstance(message.get("review"), dict):
                mailbox.put(message["review"])
            for group in message.get("groups") or []:
                inbox.put(group["step"], group["group_index"], group["trajectories"])
        except (ValueError, AttributeError, KeyError, TypeError):
            continue
        if state == "park":  # stop at the next phase boundary as a cancel does, but the run goes on later
            parking.set()
            control.set("cancel")
        elif state in ("run", "pause", "cancel") and not parking.is_set():
            control.set(state)
    control.set("cancel")
    timer = threading.Timer(PARENT_GONE_GRACE_S, lambda: os._exit(3))
    timer.daemon = True
    timer.start()


def _unless_parked(writer: Any, parking: threading.Event) -> Any:
    """The sink: every event, except that an engine stopped for parking (asked by the parent, or by itself to
    wait for the judge) does not report its run as cancelled (the parent parks the run, which goes on later)."""

    def sink(event: Any) -> None:
        data = event if isinstance(event, dict) else event.to_dict()
        if data.get("kind") == "judge_unavailable":  # the engine stops to wait for the judge: a park as well
            parking.set()
        if not (parking.is_set() and data.get("kind") == "run_finished" and data.get("status") == "cancelled"):
            writer(data)

    return sink


def _load(path: str):
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr or "train")


def _null_sink(event: Any) -> None:
    pass  # ranks above 0 report nothing: rank 0 speaks for the run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.execution.engine_child")
    parser.add_argument("events", help="file descriptor for the events, or `stdout` (under torchrun)")
    parser.add_argument("--spec", help="the run's spec as a JSON file, for every rank (else stdin's first line)")
    args = parser.parse_args()
    from training.environments.process_guard import hide_environment

    hide_environment()  # its judge key and MCP headers: never readable by the MCP servers and tools it starts
    # As torchrun sets it (training.model.gpu.distributed imports torch: not yet).
    rank = int(os.environ.get("RANK", "0"))
    spec = json.loads(Path(args.spec).read_text() if args.spec else sys.stdin.readline())
    control = StaticControl()
    events: EventWriter | None = None
    if rank > 0:
        # Another rank of a torchrun launch: it trains the groups rank 0 sends and stops with rank 0's status.
        # stdin is rank 0's (the parent's controls), and the events are rank 0's to write.
        writer: Any = _null_sink
        mailbox = inbox = None
        os.dup2(2, 1)  # stdout is rank 0's event stream: this rank's prints go to the log
    else:
        if args.events == "stdout":  # torchrun keeps no other descriptor open: stdout carries the events, and
            events_fd = os.dup(1)  # anything else printed to stdout goes to the log (stderr) instead
            os.dup2(2, 1)
        else:
            events_fd = int(args.events)
        parking = threading.Event()
        events = EventWriter(events_fd)
        writer = _unless_parked(events, parking)
        mailbox, inbox = ReviewMailbox(), Inbox()
        threading.Thread(target=_follow_control, args=(control, mailbox, parking, inbox), daemon=True,
                         name="control").start()
    try:
        from training.config import parse_run_config

        config = parse_run_config(spec["config"])
        scorer = None
        if config.judge and rank == 0:
            from studio.key_budget import budget_from_env
            from studio.scoring import judge_scorer_from_config
            from training.events import JudgeBudgetWait

            # The budget its judge's key shares with other runs (the parent sets it when the deployment does):
            # a wait for it is the run's phase.
            budget = budget_from_env(on_wait=lambda key, what, limit: writer(
                JudgeBudgetWait(key=key, what=what, limit=limit)))
            scorer = judge_scorer_from_config(config.judge, budget=budget)  # its accounting: JudgeUsage events
        engine = _load(spec.get("engine") or "training:train")
        extra = {}
        if "review" in inspect.signature(engine).parameters and mailbox is not None:
            # Always hooked: without a review gate the parent answers at once with the overrides made so far.
            extra["review"] = review_hook(mailbox, control)
        if "inbox" in inspect.signature(engine).parameters and inbox is not None:
            extra["inbox"] = inbox  # an external agent's submitted groups
        result = engine(config, scorer=scorer, sink=writer, control=control, **extra)
        if inspect.isawaitable(result):
            asyncio.run(result)
        return 0
    except BaseException as err:  # the parent must learn why, whatever it was
        traceback.print_exc()
        message = f"{type(err).__name__}: {err}".strip()
        writer({"kind": "run_failed", "step": -1, "error": message})
        return 1
    finally:
        if events is not None:
            events.close()  # every queued event reaches the parent before the process ends


if __name__ == "__main__":
    from training.servers.process_exit import end_process

    end_process(main())  # without the interpreter's finalisation, which could abort a completed run's process
