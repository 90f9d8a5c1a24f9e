"""Stopping the embedded server while a run trains, as a person meets it: `make demo`'s server (daphne, the
in-process executor) gets SIGTERM (Ctrl-C, a service manager) mid-run. The process exits promptly instead of
waiting for the run to end, takes its engine child with it, and leaves the run crashed with the reason and its
scored groups, for Resume to finish from the last checkpoint on the next start. A project's inference server that
the process holds (Try it, a checkpoint's endpoint) stops with it instead of keeping it up until it idles."""
from __future__ import annotations

import subprocess
import time

import openai
import psutil
import pytest

from tests.webapp.conftest import _worker_env, run_story, wait_for
from tests.webapp.world import APP_ENV, start_daphne, stop_daphne
from tests.webapp.serving_world import build_adapters, completed_run
from tests.webapp.factories import project_factory
from webapp.execution.runner import SERVER_STOPPED
from webapp.models import ProjectServer, Run, RunStatus
from webapp.services.project_tokens import project_token_create
from webapp.services.runs import run_resume

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 12  # long enough (about 2 s a step here) that waiting for the run would show
EXIT_WITHIN_S = 10.0  # the old behaviour waited for the run's remaining steps (see the test's printed times)


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _children(pid: int, command: str) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if command in " ".join(p.cmdline())]


def _engines(pid: int) -> list[psutil.Process]:
    return _children(pid, "webapp.execution.engine_child")


def _stops_promptly(served, children: list[psutil.Process], what: str, *, explain) -> None:
    """SIGTERM, as Ctrl-C or a service manager sends: the server exits within EXIT_WITHIN_S (waited for up to
    120 s, and the time printed) and none of `children` outlives it."""
    stopped = time.monotonic()
    served.proc.terminate()
    try:
        served.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pass
    took = time.monotonic() - stopped
    print(f"SIGTERM to exit of the server {what}: {took:.1f} s")
    assert served.proc.returncode is not None and took < EXIT_WITHIN_S, (
        f"the server took {took:.1f} s to exit after SIGTERM\n{explain()}")
    assert not [p.pid for p in children if _alive(p)], f"a child of the server ({what}) outlived it"


def test_a_server_stopped_mid_run_exits_at_once_and_leaves_the_run_crashed_with_its_groups_for_resume(
        tiny_run, tmp_path):
    run = tiny_run(steps=STEPS)  # queued: the server's start picks it up, as it does a run launched before it
    env = _worker_env(None) | APP_ENV
    served = start_daphne(env, tmp_path / "daphne.log")
    try:
        wait_for(lambda: run.checkpoints.exists(), timeout=240, message="the run's first checkpoint",
                 explain=lambda: run_story(run))
        engines = _engines(served.proc.pid)
        assert _status(run) == RunStatus.RUNNING and engines, run_story(run)
        kept = set(run.groups.values_list("pk", flat=True))  # a group is a row once it was scored

        _stops_promptly(served, engines, "mid-run", explain=lambda: run_story(run))
    finally:
        stop_daphne(served)

    run.refresh_from_db()
    assert run.status == RunStatus.CRASHED and run.error == SERVER_STOPPED, run_story(run)
    assert kept and kept <= set(run.groups.values_list("pk", flat=True))
    assert run.steps_done < STEPS

    # Resume queues it; the server's next start runs it on from its last checkpoint to the end.
    run_resume(user=run.project.owner, run=run)
    again = start_daphne(env, tmp_path / "daphne.log")
    try:
        wait_for(lambda: _status(run) == RunStatus.COMPLETED, timeout=240, message="the resumed run to complete",
                 explain=lambda: run_story(run))
    finally:
        stop_daphne(again)
    resumed = run.events.filter(kind="run_started").order_by("-seq").first().payload
    assert resumed["resumed"] is True and resumed["start_step"] > 1
    assert Run.objects.get(pk=run.pk).steps_done == STEPS


def test_a_server_stopped_while_it_holds_a_project_inference_server_stops_that_server_too(tiny_model_dir, tmp_path):
    project = project_factory(name="served")
    run = completed_run(project=project, model_dir=tiny_model_dir, adapters=build_adapters(tiny_model_dir)[:1],
                        name="demo")
    _, key = project_token_create(user=project.owner, project=project, name="my app")
    served = start_daphne(_worker_env(None) | APP_ENV, tmp_path / "daphne.log")  # servers idle out after 30 s
    try:
        client = openai.OpenAI(base_url=f"{served.url}/api/checkpoints/{run.checkpoints.get().pk}/openai/v1",
                               api_key=key, max_retries=0, timeout=120)
        client.chat.completions.create(model="demo@1", messages=[{"role": "user", "content": "Hello"}], max_tokens=4)
        inference = _children(served.proc.pid, "training.servers")
        assert ProjectServer.objects.get().status == ProjectServer.Status.READY and inference

        _stops_promptly(served, inference, "holding a project server", explain=lambda: served.log.read_text()[-3000:])
    finally:
        stop_daphne(served)
    row = ProjectServer.objects.get()
    assert row.status == ProjectServer.Status.STOPPED and row.stop_reason == "the web server process stopped"
