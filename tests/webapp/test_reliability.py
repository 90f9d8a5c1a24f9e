"""Known gaps of issue 13, each shown failing before its fix: the live stream re-checks membership, a re-score
whose worker dies is failed by the reaper, checkpoint zips stream, the run list leaves run configs in the
database, and overrides on a step redone after a resume still train."""
from __future__ import annotations

import io
import os
import signal
import zipfile

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from tests.judge_double import JudgeDouble
from tests.webapp.conftest import wait_for
from tests.webapp.live_socket import run_socket
from tests.webapp.factories import judge_factory, member_factory, project_factory, run_factory
from tests.webapp.test_review import _group
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint, Rescore, Role, Run, RunStatus
from webapp.services.playground import rescores_reap_stale
from webapp.services.projects import membership_remove
from webapp.services.review import run_review_rewards, trajectory_override

pytestmark = pytest.mark.django_db(transaction=True)  # the stream and worker tests need commits


async def test_removing_a_member_closes_their_open_live_stream_and_keeps_the_others():
    run = await sync_to_async(run_factory)(status=RunStatus.RUNNING)
    project = await sync_to_async(lambda: run.project)()
    owner = await sync_to_async(lambda: project.owner)()
    viewer = await sync_to_async(member_factory)(project=project, role=Role.VIEWER)
    sockets = {}
    for who, user in (("viewer", viewer), ("owner", owner)):
        sockets[who] = run_socket(user, run.id)
        assert (await sockets[who].connect())[0]
    await sync_to_async(membership_remove)(project=project, user=viewer, acting_user=owner)
    closed = await sockets["viewer"].receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4403}
    await sync_to_async(run_event_ingest)(run_id=run.id, event={"kind": "step_finished", "step": 1, "metrics": {}})
    assert (await sockets["owner"].receive_json_from(timeout=5))["kind"] == "step_finished"
    await sockets["owner"].disconnect()


def test_an_editor_removes_a_member_from_the_project_page(client):
    project = project_factory()
    viewer = member_factory(project=project, role=Role.VIEWER)
    client.force_login(project.owner)
    page = client.get(reverse("project-detail", args=[project.id]))
    remove = reverse("project-member-remove", args=[project.id, viewer.id])
    assert remove in page.content.decode()
    assert client.post(remove).status_code == 302
    assert not project.memberships.filter(user=viewer).exists()
    client.force_login(viewer)
    assert client.get(reverse("project-detail", args=[project.id])).status_code == 404
    client.force_login(project.owner)
    client.post(reverse("project-member-remove", args=[project.id, project.owner_id]))
    assert project.memberships.filter(user=project.owner).exists()  # the owner stays


def test_a_rescore_whose_worker_is_killed_is_failed_by_the_reaper_not_left_running(
        judge_double, start_celery_worker, settings, monkeypatch):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    settings.STUDIO_EXECUTOR = "celery"
    worker = start_celery_worker(queue="judge")
    run = run_factory(status=RunStatus.COMPLETED)
    trajectories = _group(run, step=1, scores=[0.9, 0.2])
    judge = judge_factory(project=run.project, model=judge_double.model, api_base=judge_double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY")
    judge_double.latency_s = 60  # the judge is still thinking when the worker dies
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.5)
    from webapp.services.playground import playground_create

    rescore = playground_create(user=run.project.owner, project=run.project, group_ids=[trajectories[0].group_id],
                                rubric_text="Prefer short answers.", judge_config=judge)
    wait_for(lambda: judge_double.requests or Rescore.objects.get(pk=rescore.pk).status == "failed", timeout=60,
             message="the worker to call the judge")
    assert judge_double.requests, Rescore.objects.get(pk=rescore.pk).error
    # Alive but slow: its heartbeat keeps it running past the stale limit.
    wait_for(lambda: False if Rescore.objects.get(pk=rescore.pk).heartbeat_at is None else True, timeout=10)
    import time

    time.sleep(settings.STUDIO_STALE_AFTER_S + 1)
    assert rescores_reap_stale() == [] and Rescore.objects.get(pk=rescore.pk).status == "running"
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    reaped = wait_for(rescores_reap_stale, timeout=30, message="the reaper to see the dead worker")
    assert reaped == [rescore.pk]
    rescore.refresh_from_db()
    assert rescore.status == "failed" and "stopped sending heartbeats" in rescore.error and rescore.finished_at


def test_a_checkpoint_zip_streams_the_files_of_the_checkpoint(client, tmp_path):
    run = run_factory(status=RunStatus.COMPLETED)
    root = tmp_path / "step_0001"
    (root / "adapter").mkdir(parents=True)
    weights = os.urandom(3 << 20)  # several chunks
    (root / "adapter" / "adapter_model.bin").write_bytes(weights)
    (root / "adapter_config.json").write_text('{"r": 8}')
    (root / "outside").symlink_to("/etc/hostname")
    checkpoint = Checkpoint.objects.create(run=run, step_index=1, path=str(root), adapter_name="r@1")
    client.force_login(run.project.owner)
    response = client.get(reverse("checkpoint-download", args=[checkpoint.id]))
    assert response.status_code == 200 and response.streaming
    assert 'attachment; filename="test-run-step0001.zip"' == response["Content-Disposition"]
    chunks = list(response.streaming_content)
    assert len(chunks) > 2 and max(len(c) for c in chunks) < 2 << 20  # never the whole archive at once
    archive = zipfile.ZipFile(io.BytesIO(b"".join(chunks)))
    assert sorted(archive.namelist()) == ["adapter/adapter_model.bin", "adapter_config.json"]
    assert archive.read("adapter/adapter_model.bin") == weights and archive.testzip() is None


def test_the_run_list_leaves_each_runs_config_in_the_database(client, django_assert_max_num_queries):
    project = project_factory()
    judge = judge_factory(project=project)
    for i in range(6):
        run_factory(project=project, name=f"run {i}", judge_config=judge if i % 2 else None)
    from webapp.selectors import runs as run_selectors

    listed = list(run_selectors.runs_for_project(project=project))
    assert all("config" in r.get_deferred_fields() for r in listed)
    assert [r.judged for r in listed] == [bool(r.judge_config_id) for r in listed]
    client.force_login(project.owner)
    with django_assert_max_num_queries(8):  # constant: no query per run (loading a deferred config would be one)
        page = client.get(reverse("run-list", args=[project.id]))
    assert page.content.decode().count(">judge<") == 3


def test_overrides_on_a_step_redone_after_a_resume_still_train():
    run = run_factory(status=RunStatus.RUNNING, steps=3)
    owner = run.project.owner
    run_event_ingest(run_id=run.id, event={"kind": "run_started", "start_step": 1, "total_steps": 3})
    _group(run, step=1, scores=[0.9, 0.2])
    _group(run, step=2, scores=[0.9, 0.2])
    run_review_rewards(run_id=run.id, step=2)  # step 2 handed over, then the worker died before its checkpoint
    run_event_ingest(run_id=run.id, event={"kind": "run_started", "start_step": 2, "total_steps": 3,
                                           "resumed": True})
    redone = _group(run, step=2, scores=[0.4, 0.6])
    on_redone = trajectory_override(user=owner, trajectory=redone[0], score=1.0, reason="right answer")
    assert on_redone.applies_to_training is True
    assert run_review_rewards(run_id=run.id, step=2)["rewards"] == {"0": [1.0, 0.6]}
    step_one = run.groups.get(step_index=1).trajectories.order_by("index").first()
    assert trajectory_override(user=owner, trajectory=step_one, score=0.0, reason="x").applies_to_training is False
    assert Run.objects.get(pk=run.pk).reviewed_through_step == 2


def test_a_checkpoint_saved_just_before_the_worker_died_is_recorded_when_the_engine_resumes_after_it():
    run = run_factory(status=RunStatus.RUNNING, steps=3)
    run_event_ingest(run_id=run.id, event={"kind": "run_started", "start_step": 1, "total_steps": 3})
    _group(run, step=1, scores=[0.9, 0.2])
    run_event_ingest(run_id=run.id, event={"kind": "checkpoint_saved", "step": 1, "path": "/c/1", "adapter_name": "r@1"})
    run_event_ingest(run_id=run.id, event={"kind": "step_finished", "step": 1, "metrics": {"reward_mean": 0.5}})
    _group(run, step=2, scores=[0.4, 0.6])  # then the worker died with step 2's last events still in the pipe
    run_event_ingest(run_id=run.id, event={"kind": "run_started", "start_step": 3, "total_steps": 3,
                                           "resumed": True, "checkpoint_path": "/c/2", "adapter_name": "r@2"})
    assert list(run.checkpoints.order_by("step_index").values_list("step_index", "path")) == [(1, "/c/1"), (2, "/c/2")]
    assert [(s.index, s.metrics) for s in run.steps.order_by("index")] == [
        (1, {"reward_mean": 0.5}), (2, {"lost_with_worker": True})]
    assert run.groups.filter(step_index=2).count() == 1


def test_the_run_page_of_a_long_run_renders_only_its_newest_steps_and_says_so(client):
    from webapp.models import Step
    from webapp.views.runs import STEP_ROWS

    run = run_factory(status=RunStatus.RUNNING, steps=STEP_ROWS + 30)
    Step.objects.bulk_create(Step(run=run, index=i, metrics={"reward_mean": i / 1000}) for i in range(1, STEP_ROWS + 31))
    client.force_login(run.project.owner)
    html = client.get(reverse("run-detail", args=[run.id])).content.decode()
    assert f"The newest {STEP_ROWS} of {STEP_ROWS + 30} steps" in html
    assert 'id="step-31"' in html and 'id="step-30"' not in html  # the oldest 30 are left to the chart and API
    assert html.index('id="step-31"') < html.index(f'id="step-{STEP_ROWS + 30}"')  # oldest first, as before
    from webapp.selectors import runs as run_selectors

    assert len(run_selectors.run_chart_data(run=run)["points"]) == STEP_ROWS + 30
