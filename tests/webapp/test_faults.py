"""Fault injection with real processes: PostgreSQL, Redis, a real Celery worker and the engine child (the
scripted engine, which says which moment of a step it is in). Each case kills or cuts one thing at one moment
of step 2 of a 3-step run, then checks: the run ends in a clear state (or continues), a resume reaches the
same final step count, every group of a checkpointed step is still there unchanged, every judge call paid for
before the fault is still counted, and no step or group is duplicated. The table of outcomes is printed at the
end of the test session (see `fault_table` in conftest.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.webapp.conftest import SCRIPTED_ENGINE, run_story, wait_for
from tests.webapp.factories import agent_factory, project_factory, scenario_set_factory
from tests.webapp.world import free_port, start_daphne, wait_listening
from webapp.models import JudgeCall, Run, RunStatus, Trajectory
from webapp.services import runs as run_services

pytestmark = pytest.mark.django_db(transaction=True)

STEPS, GROUPS, GROUP_SIZE, FAULT_STEP = 3, 2, 2, 2
MOMENTS = ("rollouts", "judging", "optimizer", "checkpoint")
SETTLED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CRASHED, RunStatus.CANCELLED)


def _launch(phase_s: float = 0.4) -> Run:
    project = project_factory()
    agent = agent_factory(project=project, environment_options={"phase_s": phase_s, "exact_match": True})  # no judge
    return run_services.run_launch(
        user=project.owner, project=project, name="faults", agent=agent,
        scenario_set=scenario_set_factory(project=project), steps=STEPS, group_size=GROUP_SIZE,
        groups_per_step=GROUPS, learning_rate=1e-3)


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _at(run: Run, moment: str) -> None:
    marker = Path(run.output_dir) / "moment"
    wait_for(lambda: marker.exists() and marker.read_text() == f"{FAULT_STEP}:{moment}", timeout=120,
             interval=0.02, message=f"step {FAULT_STEP} to reach {moment}", explain=lambda: run_story(run))


def _snapshot(run: Run) -> dict:
    groups = {(g.step_index, g.index): g.id for g in run.groups.all()}
    rewards = {g: sorted(Trajectory.objects.filter(group_id=i).values_list("reward", flat=True))
               for g, i in groups.items()}
    return {"groups": groups, "rewards": rewards, "calls": set(JudgeCall.objects.filter(run=run).values_list("id", flat=True)),
            "steps": sorted(run.steps.values_list("index", flat=True))}


def _settle(run: Run, timeout: float = 60) -> str:
    """Waits until the run has a settled state, running the reaper as Celery beat would."""
    def settled():
        run_services.runs_reap_stale()
        return _status(run) in SETTLED
    wait_for(settled, timeout=timeout, interval=0.3, message="the run to settle after the fault",
             explain=lambda: run_story(run))
    return _status(run)


def _check_and_record(run: Run, before: dict, fault: str, moment: str, state: str, fault_table: list) -> None:
    run.refresh_from_db()
    after = _snapshot(run)
    trajectories = Trajectory.objects.filter(group__run=run).count()
    duplicates = (len(after["steps"]) - len(set(after["steps"]))) + (trajectories - len(after["groups"]) * GROUP_SIZE)
    fault_table.append({"fault": fault, "moment": moment, "after fault": state, "final": run.status,
                        "steps": run.steps_done, "groups before": len(before["groups"]),
                        "groups after": len(after["groups"]), "calls before": len(before["calls"]),
                        "calls after": len(after["calls"]), "duplicates": duplicates})
    assert run.status == RunStatus.COMPLETED and run.steps_done == STEPS, run.error
    assert after["steps"] == list(range(1, STEPS + 1)) and run.checkpoints.count() == STEPS
    assert len(after["groups"]) == STEPS * GROUPS and duplicates == 0
    kept = {g for g in before["groups"] if g[0] < FAULT_STEP}  # steps checkpointed before the fault
    assert {g: after["groups"][g] for g in kept} == {g: before["groups"][g] for g in kept}
    assert {g: after["rewards"][g] for g in kept} == {g: before["rewards"][g] for g in kept}
    assert before["calls"] <= after["calls"]  # every judge call paid for before the fault is still counted
    total = JudgeCall.objects.filter(run=run)
    assert sum(total.values_list("cost_usd", flat=True)) == pytest.approx(0.001 * total.count())


def _resume(run: Run) -> None:
    run_services.run_resume(user=run.project.owner, run=run)
    wait_for(lambda: _status(run) in SETTLED and _status(run) != RunStatus.CRASHED or _status(run) == "completed",
             timeout=90, interval=0.2, message="the resumed run to finish")


@pytest.mark.parametrize("moment", MOMENTS)
def test_kill_9_of_the_engine_child_fails_the_run_with_the_reason_and_resume_finishes(
        moment, start_celery_worker, fault_table, settings):
    settings.STUDIO_EXECUTOR = "celery"
    start_celery_worker(SCRIPTED_ENGINE)
    run = _launch()
    _at(run, moment)
    before = _snapshot(run)
    os.kill(int((Path(run.output_dir) / "engine.pid").read_text()), signal.SIGKILL)
    state = _settle(run)
    run.refresh_from_db()
    assert state == RunStatus.FAILED and "exited with code -9" in run.error
    _resume(run)
    _check_and_record(run, before, "engine child kill -9", moment, state, fault_table)


@pytest.mark.parametrize("moment", MOMENTS)
def test_kill_9_of_the_celery_worker_leaves_the_run_crashed_and_resume_finishes(
        moment, start_celery_worker, fault_table, settings):
    settings.STUDIO_EXECUTOR = "celery"
    worker = start_celery_worker(SCRIPTED_ENGINE)
    run = _launch()
    _at(run, moment)
    before = _snapshot(run)
    os.killpg(worker.pid, signal.SIGKILL)  # worker, pool child and engine, without a goodbye
    state = _settle(run)
    run.refresh_from_db()
    assert state == RunStatus.CRASHED and "heartbeats" in run.error
    start_celery_worker(SCRIPTED_ENGINE)
    _resume(run)
    _check_and_record(run, before, "Celery worker kill -9", moment, state, fault_table)


@pytest.mark.parametrize("moment", ("judging", "checkpoint"))
def test_a_dropped_database_connection_mid_run_is_survived_without_a_resume(
        moment, start_celery_worker, fault_table, settings):
    """PostgreSQL stays up; every connection of the worker is cut. The runner's state polls and event writes
    reconnect (webapp/execution/runner.py), so the run goes on to complete by itself: nobody resumes it."""
    settings.STUDIO_EXECUTOR = "celery"
    start_celery_worker(SCRIPTED_ENGINE)
    run = _launch()
    _at(run, moment)
    before = _snapshot(run)
    with connection.cursor() as cursor:  # every other session on the test database: the worker's
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    state = _settle(run, timeout=90)
    run.refresh_from_db()
    assert state == RunStatus.COMPLETED, run.error
    _check_and_record(run, before, "database connections dropped", moment, state, fault_table)


def _redis_server(port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--logfile", str(log)], start_new_session=True)
    wait_listening(port, proc=proc, log=log, timeout=20, what="the private redis-server")
    return proc


def test_a_redis_restart_mid_run_is_survived(start_celery_worker, fault_table, settings, monkeypatch, tmp_path):
    """A private redis-server (its own port), never the shared one: the worker's broker and channel layer. The
    outage is placed, not timed: Redis goes down as step 2 is being scored and comes back only once the engine
    has reached step 2's checkpoint, so the scores, the train step and their live events of step 2 were all
    published while it was down. The run finishes by itself (no resume), every event a row."""
    from webapp.celery_app import app
    from webapp.tasks import run_execute_task

    port = free_port()
    server = _redis_server(port, tmp_path / "redis.log")
    try:
        monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{port}/0")
        start_celery_worker(SCRIPTED_ENGINE)
        run = _launch(phase_s=1.0)  # its message goes to the shared broker, where no worker of this test listens: drop it
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete("gpu")
        with app.connection_for_write(f"redis://127.0.0.1:{port}/0") as broker:
            run_execute_task.apply_async(args=[run.id], queue="gpu", connection=broker)
        _at(run, "judging")
        before = _snapshot(run)
        server.kill()
        server.wait()
        _at(run, "checkpoint")  # the engine went on, publishing into the void
        server = _redis_server(port, tmp_path / "redis-2.log")
        state = _settle(run, timeout=90)
        _check_and_record(run, before, "Redis restarted", "judging → checkpoint", state, fault_table)
        assert state == RunStatus.COMPLETED  # survived: nobody resumed it
        assert run.last_event_seq == run.events.count()  # every event is a row: a page replays what it missed
    finally:
        server.kill()


OVERRIDE_LOOP = """
import django, sys
django.setup()
from webapp.models import Trajectory
from webapp.services.review import trajectory_override
ts = list(Trajectory.objects.filter(group__run_id=int(sys.argv[1])))
print("ready", flush=True)
for i in range(100000):
    t = ts[i % len(ts)]
    trajectory_override(user=t.group.run.project.owner, trajectory=t, score=(i % 100) / 100, reason=f"pass {i}")
"""


def test_killing_the_web_process_while_overrides_are_saved_leaves_every_override_audited(fault_table):
    from tests.webapp.conftest import ROOT, _worker_env
    from tests.webapp.test_review import _group
    from webapp.models import ScoreOverride

    from tests.webapp.factories import run_factory

    run = run_factory(status=RunStatus.RUNNING)
    _group(run, step=1, scores=[0.9, 0.5, 0.1])
    proc = subprocess.Popen([sys.executable, "-c", OVERRIDE_LOOP, str(run.id)], cwd=ROOT,
                            env=_worker_env(None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout.readline().strip() == b"ready"
    wait_for(lambda: ScoreOverride.objects.filter(run=run).count() >= 30, timeout=60, message="overrides")
    proc.kill()  # mid-save, at whatever statement it is in
    proc.wait()
    saved = ScoreOverride.objects.filter(run=run).count()
    for t in Trajectory.objects.filter(group__run=run):
        last = ScoreOverride.objects.filter(trajectory=t).order_by("-id").first()
        assert last is not None and t.override_score == last.after  # the score and its audit row, or neither
    fault_table.append({"fault": "override-saving process kill -9", "moment": f"override save ({saved} saved)",
                        "after fault": run.status, "final": run.status, "steps": "-", "groups before": 1,
                        "groups after": run.groups.count(), "calls before": "-", "calls after": "-",
                        "duplicates": run.groups.count() - 1})
    assert saved >= 30


def _dead(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet (Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every process below `pid` (from /proc; Linux)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found[child] = commands.get(child, "")
                frontier.append(child)
    return found


def test_kill_9_of_the_inference_server_between_rollouts_and_training_fails_the_run_with_the_reason_and_resume_finishes(
        start_celery_worker, tiny_run, judge_double, fault_table, settings, monkeypatch):
    """The tiny real model on the local inference server (this test is about that server), steps not pipelined.
    The judge holds step 1's scoring until the server is dead, so the fault lands at one known moment: every
    rollout of step 1 is done and the next call to the server (serving step 1's new adapter) meets a dead one.
    The run fails, saying so; a resume starts a new server and finishes, nothing lost or duplicated."""
    import threading

    from tests.judge_double import JudgeDouble, marker_or_brevity
    from tests.webapp.factories import judge_factory, rubric_factory
    from training.fixtures.tiny_model import DEMO_USER_MESSAGE

    settings.STUDIO_EXECUTOR = "celery"
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    dead, score = threading.Event(), JudgeDouble.score_by(marker_or_brevity)

    def respond(request):
        if DEMO_USER_MESSAGE in request.prompt_text:  # a game's group (not the launch's test of the judge)
            dead.wait(timeout=300)
        return score(request)

    judge_double.responder = respond
    worker = start_celery_worker()
    project = project_factory()
    judge = judge_factory(project=project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    run = tiny_run(steps=2, project=project, judge_config=judge,
                   rubric_version=rubric_factory(project=project).versions.get(),
                   server={"kind": "local"}, overrides={"pipeline": {"enabled": False}})
    # Each group goes to the judge as soon as its own rollouts are done, so the first group at the judge does not
    # mean the step's rollouts are over: the kill waits for both groups of step 1 (groups_per_step=2). Killed
    # after the first, the other group's rollouts met a dead server and it kept 2 of its 4 (CI: {(1, 0): 2, ...}).
    wait_for(lambda: sum(DEMO_USER_MESSAGE in r.prompt_text for r in judge_double.requests) >= 2, timeout=300,
             interval=0.05, message="both of step 1's groups to reach the judge (every rollout of the step done)")
    servers = [pid for pid, cmd in _descendants(worker.pid).items() if "training.servers.local" in cmd]
    assert len(servers) == 1, _descendants(worker.pid)
    before = _snapshot(run)
    os.kill(servers[0], signal.SIGKILL)
    wait_for(lambda: _dead(servers[0]), timeout=30, message="the server to be gone")
    dead.set()
    state = _settle(run, timeout=300)
    run.refresh_from_db()
    reason = run.error
    assert state == RunStatus.FAILED and run.steps_done == 0, (state, reason)
    assert "Connect" in reason or "inference server" in reason, reason  # it says what broke
    run_services.run_resume(user=run.project.owner, run=run)
    wait_for(lambda: _status(run) in (RunStatus.COMPLETED, RunStatus.FAILED), timeout=300, interval=0.5,
             message="the resumed run to finish")
    run.refresh_from_db()
    after = _snapshot(run)
    sizes = {(g.step_index, g.index): g.trajectories.count() for g in run.groups.all()}
    fault_table.append({"fault": "inference server kill -9", "moment": "scoring", "after fault": state,
                        "final": run.status, "steps": run.steps_done, "groups before": len(before["groups"]),
                        "groups after": len(after["groups"]), "calls before": len(before["calls"]),
                        "calls after": len(after["calls"]), "duplicates": sum(max(0, n - 4) for n in sizes.values())})
    assert run.status == RunStatus.COMPLETED and run.steps_done == 2, run.error
    assert sorted(after["steps"]) == [1, 2] and sorted(sizes) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(n == 4 for n in sizes.values()), sizes  # every rollout of every group, none twice
    print(f"inference server kill: the run failed with {reason[:300]!r}")


def _daphne(port: int, log: Path) -> subprocess.Popen:
    """The web process as docs/webapp.md deploys it, on the test database: its own, not the world's shared one
    (this test kills it with -9 and restarts it on the same port)."""
    from tests.webapp.conftest import _worker_env

    env = _worker_env(None) | {"STUDIO_API_PER_MINUTE": "100000"}  # the test saves faster than a person
    return start_daphne(env, log, port=port).proc


def test_kill_9_of_the_daphne_web_process_mid_override_loses_no_confirmed_override(fault_table, tmp_path):
    """Logged in over HTTP, four users' worth of overrides stream into the real web server until it is killed
    with -9 mid-stream; after a restart every override the server confirmed is there with its audit row, and
    every trajectory's score is its last audit row's (nothing half-written)."""
    import threading

    import requests

    from tests.webapp.factories import PASSWORD, run_factory
    from tests.webapp.test_review import _group
    from webapp.models import ScoreOverride

    run = run_factory(status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.9, 0.5, 0.1, 0.3])
    port, log = free_port(), tmp_path / "daphne.log"
    base = f"http://127.0.0.1:{port}"
    server = _daphne(port, log)
    http = requests.Session()
    http.get(f"{base}/login/", timeout=30)
    login = http.post(f"{base}/login/", data={"username": run.project.owner.username, "password": PASSWORD,
                                              "csrfmiddlewaretoken": http.cookies["csrftoken"]},
                      allow_redirects=False, timeout=30)
    assert login.status_code == 302, login.text[:500]
    headers = {"X-CSRFToken": http.cookies["csrftoken"], "Referer": f"{base}/"}
    confirmed: dict[str, tuple[int, float]] = {}  # reason -> (audit row id, score) the server answered with
    failures: list[str] = []

    def save(worker: int) -> None:
        session = requests.Session()
        session.cookies.update(http.cookies)
        for i in range(100000):
            t, score, reason = trajectories[worker], (i % 100) / 100, f"client {worker} pass {i}"
            try:
                answer = session.post(f"{base}/api/trajectories/{t.id}/override/", json={"score": score, "reason": reason},
                                      headers=headers, timeout=30)
            except requests.ConnectionError:
                return  # the server died under this request: it was never confirmed
            if answer.status_code != 201:
                failures.append(f"{answer.status_code} {answer.text[:200]}")
                return
            confirmed[reason] = (answer.json()["id"], score)

    clients = [threading.Thread(target=save, args=(w,)) for w in range(len(trajectories))]
    for client in clients:
        client.start()
    try:
        wait_for(lambda: len(confirmed) >= 40 or failures, timeout=60, interval=0.05, message="confirmed overrides")
        os.killpg(server.pid, signal.SIGKILL)  # mid-stream: four requests are somewhere in their save
        server.wait()
        for client in clients:
            client.join(timeout=60)
        assert not failures, failures
        at_kill = len(confirmed)
        server = _daphne(port, log)
        after = http.post(f"{base}/api/trajectories/{trajectories[0].id}/override/",  # the session survived
                          json={"score": 0.42, "reason": "after the restart"}, headers=headers, timeout=30)
        assert after.status_code == 201, after.text[:500]
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    saved = list(ScoreOverride.objects.filter(run=run))
    rows = {o.reason: o for o in saved}
    lost = [r for r, (pk, score) in confirmed.items() if r not in rows or (rows[r].id, rows[r].after) != (pk, score)]
    unconfirmed = len(saved) - at_kill - 1  # saved and committed, but the answer died with the server
    for t in Trajectory.objects.filter(group__run=run):
        last = ScoreOverride.objects.filter(trajectory=t).order_by("-id").first()
        assert last is not None and t.override_score == last.after  # the score and its audit row, or neither
    fault_table.append({"fault": "daphne web process kill -9", "moment": f"override save ({at_kill} confirmed)",
                        "after fault": f"restarted, {unconfirmed} committed unanswered", "final": run.status,
                        "steps": "-", "groups before": 1, "groups after": run.groups.count(), "calls before": "-",
                        "calls after": "-", "duplicates": len(saved) - len(rows)})
    assert not lost, lost[:5]
    assert 0 <= unconfirmed <= len(trajectories) and len(saved) == len(rows) and run.groups.count() == 1
