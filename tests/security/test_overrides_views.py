"""What people are shown of a run's settings: no worker paths or addresses (the run's directory, its checkpoints,
the checkpoint a fork started from, the inference server's address), on any page, in the API, in the export or
in the events a page replays; a fork's origin is "run X, step N". And runs stored before the allow-list, with
keys a person may no longer send, still show, resume and fork (a run is a snapshot)."""
from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.urls import reverse

from tests.security.overrides_helpers import api_as, page_as, victim_with_a_checkpoint
from tests.webapp.factories import member_factory
from webapp.execution.runner import run_execute
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Role, Run, RunStatus
from webapp.services.runs import run_finish_after_engine, run_fork

pytestmark = pytest.mark.django_db

WORKER_ADDRESS = "10.7.7.7"


def _launched_before_the_allow_list(run: Run, checkpoint: Checkpoint) -> Run:
    """What the old launch stored for {"server": {...}, "device": ..., "init_checkpoint": <a path>, ...}."""
    run.config = {**run.config, "device": "cpu", "init_checkpoint": checkpoint.path,
                  "lora": {**run.config["lora"], "r": 16, "alpha": 32},
                  "server": {**run.config["server"], "kind": "inprocess", "host": WORKER_ADDRESS, "port": 8123,
                             "max_lora_rank": 16},
                  "trainer": {**run.config["trainer"], "gradient_checkpointing": True}}
    run.save(update_fields=["config"])
    return run


def _everything_a_viewer_reads(viewer, project, runs: list[Run]) -> str:
    api, pages = api_as(viewer), page_as(viewer)
    seen = [api.get(f"/api/runs/?project={project.id}"), pages.get(reverse("run-list", args=[project.id]))]
    for run in runs:
        seen += [api.get(f"/api/runs/{run.id}/"), api.get(f"/api/runs/{run.id}/checkpoints/"),
                 api.get(f"/api/runs/{run.id}/steps/")]
        seen += [pages.get(reverse(name, args=[run.id])) for name in (
            "run-detail", "run-header", "run-steps", "run-checkpoints", "run-checkpoint-table", "run-groups")]
        seen.append(pages.get(reverse("run-export", args=[run.id])))
    assert all(r.status_code == 200 for r in seen), [(r.status_code, r.wsgi_request.path) for r in seen]
    text = "".join(b"".join(r.streaming_content).decode() if r.streaming else r.content.decode() for r in seen)
    # and the events a page replays on connecting (the consumer sends RunEvent.as_message())
    return text + json.dumps([e.as_message() for run in runs for e in run.events.order_by("seq")])


def test_a_viewer_of_someone_elses_project_finds_no_worker_path_or_address():
    victim = victim_with_a_checkpoint()
    owner = victim.project.owner
    fork = run_fork(user=owner, checkpoint=victim.checkpoint, name="forked", rubric_version=None, judge_config=None,
                    steps=2)
    old = _launched_before_the_allow_list(victim.run, victim.checkpoint)
    # The fork's engine fails quoting its paths (as TrainingError messages do); a checkpoint of its own is saved.
    Run.objects.filter(pk=fork.pk).update(status=RunStatus.RUNNING, worker="w")
    fork_dir = f"{fork.output_dir}/checkpoints/step_0001"
    run_event_ingest(run_id=fork.id, event={"kind": "checkpoint_saved", "step": 1, "path": fork_dir,
                                            "adapter_name": "forked@1"})
    run_event_ingest(run_id=fork.id, event={"kind": "run_failed", "step": 2, "error": (
        f"init_checkpoint {victim.checkpoint.path} holds no adapter; see {fork.output_dir}/engine.log")})
    viewer = member_factory(project=victim.project, role=Role.VIEWER)

    seen = _everything_a_viewer_reads(viewer, victim.project, [fork, old])

    secrets = [fork.output_dir, old.output_dir, victim.checkpoint.path, fork_dir, str(settings.STUDIO_RUNS_DIR),
               WORKER_ADDRESS, "8123"]
    assert [s for s in secrets if s in seen] == []
    assert "init_checkpoint &lt;the parent&#x27;s checkpoint&gt; holds no adapter" in seen  # the failure, legible
    assert f"run {victim.run.name} (#{victim.run.id}), step 1" in seen  # the fork's origin, on its settings table
    body = api_as(viewer).get(f"/api/runs/{fork.id}/").json()
    assert body["started_from"] == {"run": victim.run.id, "run_name": victim.run.name, "step": 1}
    assert body["config"]["grpo"] == fork.config["grpo"] and "output_dir" not in body["config"]
    # The worker still has them: what is hidden from people is kept for the engine.
    assert Run.objects.get(pk=fork.pk).config["init_checkpoint"] == victim.checkpoint.path


def test_an_engine_log_tail_names_the_runs_directory_instead_of_spelling_it():
    victim = victim_with_a_checkpoint()
    Run.objects.filter(pk=victim.run.pk).update(status=RunStatus.RUNNING, worker="w")
    run_finish_after_engine(run_id=victim.run.id, worker="w", exit_code=1,
                            log_tail=f"OSError: [Errno 28] No space left: '{victim.run.output_dir}/state.pt'")
    error = Run.objects.get(pk=victim.run.pk).error
    assert victim.run.output_dir not in error and "No space left: '<the run's directory>/state.pt'" in error


@pytest.mark.django_db(transaction=True)  # the worker's path: the engine runs in a child process
def test_a_run_stored_with_keys_now_refused_still_shows_resumes_and_forks(settings):
    settings.STUDIO_ENGINE = "tests.webapp.scripted_engine:train"  # the real event contract, no model
    victim = victim_with_a_checkpoint()
    old = _launched_before_the_allow_list(victim.run, victim.checkpoint)
    Run.objects.filter(pk=old.pk).update(status=RunStatus.CRASHED)
    stored = Run.objects.get(pk=old.pk).config
    owner = victim.project.owner
    # shows
    assert page_as(owner).get(reverse("run-detail", args=[old.id])).status_code == 200
    assert api_as(owner).get(f"/api/runs/{old.id}/").json()["config"]["server"]["kind"] == "inprocess"
    # resumes, from its stored config, untouched
    assert api_as(owner).post(f"/api/runs/{old.id}/resume/").status_code == 200
    assert run_execute(run_id=old.id, worker="cpu@test") == RunStatus.COMPLETED
    assert Run.objects.get(pk=old.pk).config == stored
    # forks: the parent's adapter shape and environment carry over; the server and device are the deployment's
    settings.STUDIO_RUN_WORKER_CONFIG = {"device": "cpu", "server": {"kind": "local"}}
    response = api_as(owner).post(f"/api/runs/{old.id}/fork/", {"step": 1, "name": "child"}, format="json")
    assert response.status_code == 201, response.content
    child = Run.objects.get(pk=response.json()["id"])
    assert child.config["lora"] == stored["lora"] and child.config["environment"] == stored["environment"]
    assert child.config["server"]["kind"] == "local" and child.config["server"]["host"] == "127.0.0.1"
    assert child.config["server"]["max_lora_rank"] == 16  # the server takes the carried rank-16 adapter
    # the resumed run's step-1 checkpoint, as the worker recorded it (by id in the request, by path here)
    assert child.config["init_checkpoint"] == Checkpoint.objects.get(run=old, step_index=1).path
