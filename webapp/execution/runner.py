"""Executes one run: claims it, starts the engine process, turns its events into rows and live messages,
forwards pause / resume / cancel, and beats the heartbeat. Used by both the Celery task and the in-process
executor, so both paths run the same code.

The engine runs in a child process (engine_child.py): its torch threads and GIL never slow the web process
or the Celery worker's heartbeat, and a worker killed mid-run takes the child down with it (stdin closes).
A run with `trainer.distributed` set starts its training processes through torchrun (`trainer.processes`, or
one per `trainer.gpus` entry); rank 0 is the one this module talks to.
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from pydantic import ValidationError

from training.config import TrainerConfig
from training.types import TrainingError

from studio.key_policy import POLICY_ENV
from webapp.egress_policy import egress_env
from webapp.judge_budget import judge_budget_env
from webapp.judge_keys import judge_key_policy
from webapp.live.ingest import run_event_ingest
from webapp.models import Run, RunStatus
from webapp.selectors.external import external_groups_to_forward, external_last_trained_step, is_external
from webapp.services.external import external_groups_mark_forwarded
from webapp.services.checkpoint_retention import run_checkpoints_prune
from webapp.services.monitoring import run_monitor_pause_check
from webapp.services.review import run_review_rewards
from webapp.services.gpu_plans import worker_gpus_report_here
from webapp.services.run_config import run_model_problems
from webapp.services.runs import (
    run_claim, run_claim_next, run_control_state, run_finish_after_engine, run_heartbeat, run_judge_budget_check,
    run_mark_crashed, run_park,
)
from webapp.execution.model_fetch import model_engine_env, run_model_fetch
from webapp.execution.parking import kept_step_settle, park_wanted
from webapp.execution.stopping import process_stopping
from webapp.services.mcp_servers import run_secrets_environment
from webapp.services.secrets import secret_decrypt
from webapp.services.sft_runs import sft_engine_config
from webapp.services.trackers import run_trackers_chosen, tracker_engine_config

log = logging.getLogger(__name__)
POLL_S = 0.25
PARK_GRACE_S = 600.0  # how long a paused engine asked to stop for parking may take to reach a phase boundary
INGEST_RETRY_S = (0.5, 1.0, 2.0, 4.0, None)  # waits between attempts to record an event; None: give up
# The web app's own secrets: the engine never needs them, and runs code a project configured.
APP_SECRETS = ("SECRET_KEY", "STUDIO_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL")
# What a run says when the server process that ran it in-process stopped under it (stopping.py); the same advice
# as embedded_startup gives the orphans of a process that died without a word.
SERVER_STOPPED = "the server stopped during the run; resume to continue from the last checkpoint"


def engine_env(run: Run) -> dict[str, str]:
    judge = run.judge_config
    # The engine gets no worker key but its judge's: litellm would otherwise find the provider's usual variable.
    # A run that reports to W&B gets the deployment's W&B key too (training/monitoring/trackers.py; MLflow's variables,
    # MLFLOW_TRACKING_*, are no *_API_KEY and pass as they are).
    kept = {judge.api_key_env if judge else None,
            "WANDB_API_KEY" if "wandb" in run_trackers_chosen(config=run.config or {}) else None}
    # Langfuse's keys (LANGFUSE_SECRET_KEY is no *_API_KEY) only to a run that reports to Langfuse.
    langfuse = "langfuse" in run_trackers_chosen(config=run.config or {})
    env = {k: v for k, v in os.environ.items() if k not in APP_SECRETS
           and not (k.endswith("_API_KEY") and k not in kept) and (langfuse or not k.startswith("LANGFUSE_"))}
    threads = str(settings.STUDIO_ENGINE_THREADS)
    env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1"})
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # The token its inference server requires of every request, and that the web app's endpoint sends it.
    env["STUDIO_INFERENCE_TOKEN"] = settings.STUDIO_INFERENCE_TOKEN
    # The engine checks the judge's key against the administrators' policy too, whatever the config says.
    env[POLICY_ENV] = json.dumps({key: list(bases) for key, bases in judge_key_policy().items()})
    # ... and every outbound address (judge API base, MCP servers) against the deployment's egress policy.
    env.update(egress_env())
    # The budget its judge's key shares with other runs, where the deployment set one (webapp/judge_budget.py).
    env.update(judge_budget_env(api_key_env=((run.config or {}).get("judge") or {}).get("api_key_env")))
    if judge is not None and judge.api_key_encrypted and not judge.api_key_env:
        # Only the child's environment ever holds the plain key; the stored config names the variable.
        env["STUDIO_JUDGE_API_KEY"] = secret_decrypt(token=judge.api_key_encrypted)
    # The run's frozen MCP header values: the config names these variables (headers_env), never the values.
    env.update(run_secrets_environment(secrets_encrypted=run.secrets_encrypted))
    return env


def _nice() -> None:
    if settings.STUDIO_ENGINE_NICE:
        os.nice(settings.STUDIO_ENGINE_NICE)


def gpu_worker_refusal(config: dict) -> str | None:
    """Why a GPU worker must not run `config`, or None. A run asks for the CPU (and with it the local server,
    transformers' generate) by `device: cpu`; anything else would quietly train at a fraction of the speed."""
    device = config.get("device", "auto")
    if device == "cpu":
        return None
    kind = config.get("server", {}).get("kind", "local")
    samples = config.get("kind") != "sft" or bool(config.get("scenarios"))  # an SFT run samples for its win rate only
    if samples and kind in ("local", "inprocess"):  # inprocess is the local server's engine in the run's own process
        return (f"a GPU worker does not sample with server.kind '{kind}' (transformers' generate): use 'vllm' or "
                "'external', or set device: cpu to run on this worker's CPU")
    import torch  # only GPU workers ask; the web process never imports torch for this

    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        return (f"this GPU worker sees no CUDA device (CUDA_VISIBLE_DEVICES={visible}), so device {device!r} "
                "resolves to cpu; check the worker's GPU reservation, or set device: cpu to run on its CPU")
    return None


def start_problems(config: dict, env: dict[str, str], *, model_dir: Path | None = None) -> list[str]:
    """What this worker lacks to run `config`, in plain sentences: the judge's key variable in the engine's
    environment `env`, how many training processes to start, and (unless STUDIO_MODEL_CHECK is off) a base
    model that exists, loads and fits here. `model_dir`: where the managed download put the hub model
    (model_fetch.py), which is what the check reads; its problems name the model's id, not the directory."""
    key = (config.get("judge") or {}).get("api_key_env")
    problems = [f"the judge's key variable {key} is not set on this worker; set it in the worker's environment "
                "and restart it, or store the key on the judge"] if key and not env.get(key) else []
    try:
        TrainerConfig.model_validate(config.get("trainer") or {}).launch_processes()
    except (TrainingError, ValidationError) as err:
        problems.append(str(err))
    if settings.STUDIO_MODEL_CHECK != "off" and model_dir is not None:
        name = str(config.get("base_model"))
        problems += [p.replace(str(model_dir), name) for p in
                     run_model_problems(config={**config, "base_model": str(model_dir)})]
    elif settings.STUDIO_MODEL_CHECK != "off":
        problems += run_model_problems(config=config)
    return problems


def _engine_config(config: dict) -> dict:
    """The run's config as this worker starts it: an external agent's inference server listens where the web
    process can reach it (STUDIO_ENGINE_HOST), which is where this worker is, not what the run is."""
    if settings.STUDIO_ENGINE_HOST and (config.get("environment") or {}).get("kind") == "external":
        return {**config, "server": {**(config.get("server") or {}), "host": settings.STUDIO_ENGINE_HOST}}
    return config


def run_execute(*, run_id: int, worker: str) -> str:
    """Returns what happened: "skipped" when another worker owns the run (or it is no longer queued)."""
    if not run_claim(run_id=run_id, worker=worker):
        log.info("run %s is not queued; %s leaves it alone", run_id, worker)
        return "skipped"
    return _execute_claimed(run_id=run_id, worker=worker)


def runs_execute_in_order(*, worker: str) -> dict[int, str]:
    """Runs queued runs one after another, the first launched first, until none waits; returns each run's
    status as it left this worker. The entry of a worker slot (the Celery task, the in-process executor): the
    slot is free again the moment a run finishes or parks, and takes whichever run waits longest, so a run
    launched later never starts first and a resumed parked run starts as soon as the slot is free."""
    done: dict[int, str] = {}
    while not process_stopping() and (run_id := run_claim_next(worker=worker)) is not None:
        done[run_id] = _execute_claimed(run_id=run_id, worker=worker)
    return done


def _execute_claimed(*, run_id: int, worker: str) -> str:
    run = Run.objects.select_related("judge_config").get(pk=run_id)
    refusal = gpu_worker_refusal(run.config) if settings.STUDIO_GPU_WORKER else None
    if refusal:
        run_event_ingest(run_id=run_id, event={"kind": "run_failed", "step": -1, "error": refusal})
        return Run.objects.values_list("status", flat=True).get(pk=run_id)
    try:
        env = engine_env(run)
    except ValueError as err:
        run_event_ingest(run_id=run_id, event={"kind": "run_failed", "step": -1, "error": str(err)})
        return "failed"
    # A hub model is fetched first, into the workers' shared cache (model_fetch.py): its errors come before any GPU.
    fetched = run_model_fetch(run_id=run_id, worker=worker, config=run.config)
    if fetched.error:
        run_event_ingest(run_id=run_id, event={"kind": "run_failed", "step": -1, "error": fetched.error})
        return Run.objects.values_list("status", flat=True).get(pk=run_id)
    if fetched.cancelled:
        run_finish_after_engine(run_id=run_id, worker=worker, exit_code=0, log_tail="")
        return Run.objects.values_list("status", flat=True).get(pk=run_id)
    env = model_engine_env(env, fetched)
    if problems := start_problems(run.config, env, model_dir=fetched.snapshot):  # at once, not after the server started
        run_event_ingest(run_id=run_id, event={"kind": "run_failed", "step": -1, "error": "; ".join(problems)})
        return Run.objects.values_list("status", flat=True).get(pk=run_id)
    out_dir = Path(run.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    kept_step_settle(run=run, out_dir=out_dir)
    log_path = out_dir / "engine.log"
    try:  # an SFT run's dataset version becomes the engine's data file, in the run's own directory
        config = sft_engine_config(run=run, config=tracker_engine_config(run_id=run.id, config=_engine_config(
            run.config)), directory=out_dir)
    except (OSError, ValueError) as err:
        run_event_ingest(run_id=run_id, event={"kind": "run_failed", "step": -1,
                                               "error": f"could not write the run's dataset: {err}"})
        return Run.objects.values_list("status", flat=True).get(pk=run_id)
    spec = {"config": config, "engine": settings.STUDIO_ENGINE}
    processes = TrainerConfig.model_validate(run.config.get("trainer") or {}).launch_processes()
    with open(log_path, "ab") as log_file:
        if processes == 1:
            read_fd, write_fd = os.pipe()
            proc = subprocess.Popen(
                [sys.executable, "-m", "webapp.execution.engine_child", str(write_fd)],
                stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                env=env, cwd=str(settings.BASE_DIR), preexec_fn=_nice,
            )
            os.close(write_fd)
        else:
            # torchrun starts the ranks and passes no descriptor but stdin/stdout/stderr on: rank 0 writes the
            # events to stdout, and every rank reads the spec from a file (stdin is rank 0's, for controls).
            spec_path = out_dir / "engine-spec.json"
            spec_path.write_text(json.dumps(spec))
            proc = subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
                 "-m", "webapp.execution.engine_child", "stdout", "--spec", str(spec_path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file,
                env=env, cwd=str(settings.BASE_DIR), preexec_fn=_nice,
            )
            read_fd = os.dup(proc.stdout.fileno())
            proc.stdout.close()
    try:
        if processes == 1:
            _write(proc, spec)
        # Parked as soon as the engine's events end, not after its exit: tearing down a model and a server can
        # take longer than the reaper waits for a heartbeat.
        parked = _pump(proc, read_fd, run_id=run_id, worker=worker) and \
            run_control_state(run_id=run_id, worker=worker) != "cancel" and run_park(run_id=run_id, worker=worker)
    finally:
        os.close(read_fd)
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = _stop(proc)
    if not parked:
        run_finish_after_engine(run_id=run_id, worker=worker, exit_code=code, log_tail=_tail(log_path))
    _checkpoints_prune(run_id)
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _checkpoints_prune(run_id: int) -> None:
    """An ended run's checkpoints beyond its retention policy go now; a failure is left to the schedule's next
    pass (services/checkpoint_retention.py), never to the next queued run's start."""
    try:
        run_checkpoints_prune(run_id=run_id)
    except (OSError, DatabaseError):
        log.exception("run %s: could not delete the checkpoints its policy does not keep", run_id)


def _stop(proc: subprocess.Popen) -> int:
    """Ends the engine: SIGTERM first, which torchrun passes on to its ranks (they run in sessions of their own
    and would outlive a SIGKILL of torchrun), then SIGKILL."""
    proc.terminate()
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _write(proc: subprocess.Popen, message: dict) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass  # the engine already exited; its events (or exit code) say why


def _pump(proc: subprocess.Popen, read_fd: int, *, run_id: int, worker: str) -> bool:
    """Records the engine's events and passes the run's state on until the engine exits; True when it was
    asked to stop for parking (the caller then parks the run)."""
    buffer = b""
    sent_state = "run"
    last_beat = time.monotonic()
    review_step: int | None = None  # a step whose review the engine is waiting for
    park_by: float | None = None  # set once the engine was asked to stop for parking: the deadline to do so
    external = is_external(Run.objects.only("config").get(pk=run_id))
    if external:
        # A starting engine has none of the groups submitted for the steps it will run: all of them, again.
        _forward_groups(proc, run_id, after_step=external_last_trained_step(run_id=run_id))
    while True:
        ready, _, _ = select.select([read_fd], [], [], POLL_S)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                return park_by is not None
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    kind, step = _ingest_line(run_id, line)
                    if kind == "review_requested":
                        review_step = step
                    elif kind == "judge_usage":
                        run_judge_budget_check(run_id=run_id)  # pauses the run once its judge budget is spent
                    elif kind == "monitor_alert":
                        run_monitor_pause_check(run_id=run_id)  # pauses the run when the alert's monitor says so
                    elif kind == "judge_unavailable":  # the engine stops by itself to wait for the judge
                        park_by = time.monotonic() + PARK_GRACE_S
        if review_step is not None and _review_released(run_id, review_step):
            # Events arrive in order, so every group of the step is a row by now: its overrides are all there.
            _write(proc, {"review": run_review_rewards(run_id=run_id, step=review_step)})
            review_step = None
        if process_stopping():
            # The server process running this in-process is exiting (a SIGTERM, a Ctrl-C) and is joining this
            # thread: the run cannot go on here. It is left at once as the server's next start would leave it,
            # crashed and resumable from its last checkpoint; what was recorded stays. Crashed first, so that the
            # engine's exit is never reported as a failure.
            log.warning("run %s: the server process is stopping; stopping its engine", run_id)
            run_mark_crashed(run_id=run_id, reason=SERVER_STOPPED)
            _stop(proc)
            return False
        now = time.monotonic()
        try:
            if external:
                _forward_groups(proc, run_id)
            if now - last_beat >= settings.STUDIO_HEARTBEAT_S:
                run_heartbeat(run_id=run_id, worker=worker)
                worker_gpus_report_here(worker=worker)  # what the launch page plans against (docs/gpu.md)
                last_beat = now
            state = run_control_state(run_id=run_id, worker=worker)
        except DatabaseError:
            # A dropped connection (database restart, failover): reconnect on the next round. Events wait in
            # the pipe meanwhile; if the database stays away the heartbeat stops and the reaper says so.
            log.warning("run %s: database error polling its state; reconnecting", run_id)
            close_old_connections()
            time.sleep(POLL_S)
            continue
        if state == "lost":
            # Two engines must never write one run: this one stops now, and the run resumes from its checkpoint.
            log.warning("run %s is no longer %s's; stopping its engine", run_id, worker)
            _stop(proc)
            return False
        if park_by is not None:
            # The engine stops by itself at its next phase boundary, with its optimizer state saved and every
            # event written, so no step is cut between its checkpoint and its results. One that does not in time
            # is stopped; a resume then redoes its step.
            if now > park_by:
                log.warning("run %s: the engine did not stop for parking within %s s; stopping it", run_id, PARK_GRACE_S)
                _stop(proc)
            continue
        if park_wanted(run_id=run_id, state=state, awaiting_step=review_step):
            # A paused run, or one waiting for a person's review, must not hold the worker's one run slot while
            # others wait: its engine stops, and the run is parked; Resume (or the review's approval) queues it
            # again, to continue from its last checkpoint (at review: with the step's scored groups).
            _write(proc, {"control": "park"})
            park_by = now + PARK_GRACE_S
            continue
        if state != sent_state:
            _write(proc, {"control": state})
            sent_state = state


def _forward_groups(proc: subprocess.Popen, run_id: int, after_step: int | None = None) -> None:
    """Sends an external agent's submitted groups to the engine as one `{"groups": [...]}` line: those not sent
    yet, or with `after_step` every group of a later step. The engine keeps the first group per (step, index)."""
    groups = external_groups_to_forward(run_id=run_id, after_step=after_step)
    if groups:
        _write(proc, {"groups": [{"step": g.step, "group_index": g.group_index, "trajectories": g.trajectories}
                                 for g in groups]})
        external_groups_mark_forwarded(group_ids=[g.pk for g in groups])


def _review_released(run_id: int, step: int) -> bool:
    """Without a gate at once; with it once a reviewer approved (the run left awaiting_review, or stops). A gated
    run paused before its step's review began keeps the step until its review is approved (the ingest keeps
    such a run paused; Resume opens the review)."""
    row = Run.objects.values("status", "review_gate", "review_approved_step").get(pk=run_id)
    if row["status"] == RunStatus.AWAITING_REVIEW:
        return False
    return not (row["review_gate"] and row["status"] == RunStatus.PAUSED and step > row["review_approved_step"])


def _ingest_line(run_id: int, line: bytes) -> tuple[str | None, int | None]:
    """Records one event; returns its kind and step (for the review handshake)."""
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        log.error("run %s: unreadable engine event %r", run_id, line[:200])
        return None, None
    for delay in INGEST_RETRY_S:
        try:
            run_event_ingest(run_id=run_id, event=event)
            break
        except DatabaseError:
            # A scored group must not be dropped on a database blip: retry, and if the database stays away,
            # raise. The heartbeat then stops, the run shows as crashed, and a resume redoes the step.
            if delay is None:
                raise
            log.warning("run %s: database error recording %s; retrying in %s s", run_id, event.get("kind"), delay)
            close_old_connections()
            time.sleep(delay)
        except Exception:  # a malformed event must not lose the rest of the run; it is logged with its kind
            log.exception("run %s: could not record engine event %s", run_id, event.get("kind"))
            break
    step = event.get("step")
    return event.get("kind"), int(step) if isinstance(step, int) else None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=lines))
    except OSError:
        return ""
