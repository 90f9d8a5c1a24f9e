"""Issue 33, item 3, as the attacker does it: an ordinary account creates its own project and launches a run whose
"Advanced (JSON)" reaches what the form hides (an inference server of its choosing, a public bind address,
another project's adapter by path, the worker's directories, a device, settings smuggled a level down), through
the API and through the launch form; then forks another project's checkpoint. Every attempt is refused with the
dotted key named, stores nothing and contacts nothing."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.security.overrides_helpers import (
    FakeMetadataService, api_as, attacker_signs_up, page_as, victim_with_a_checkpoint,
)
from tests.webapp.factories import member_factory
from webapp.models import Checkpoint, Role, Run, RunStatus

pytestmark = pytest.mark.django_db

# (what the attacker sends, the dotted keys the refusal must name); "{metadata}" and "{victim}" are filled in.
ATTACKS = {
    "an inference server of the attacker's choosing": (
        {"server": {"kind": "external", "url": "{metadata}"}}, ["server.kind", "server.url"]),
    "the unauthenticated local server on every interface": ({"server": {"host": "0.0.0.0", "port": 8000}},
                                                            ["server.host", "server.port"]),
    "another project's adapter by its path": ({"init_checkpoint": "{victim}"}, ["init_checkpoint"]),
    "the worker's directories": ({"output_dir": "/etc/cron.d"}, ["output_dir"]),
    "a file on the worker": ({"scenarios_file": "/etc/passwd"}, ["scenarios_file"]),
    "an interpreter": ({"server": {"kind": "vllm", "python": "/bin/sh"}}, ["server.kind", "server.python"]),
    "command-line flags": ({"server": {"kind": "vllm", "extra_args": ["--chat-template", "/etc/shadow"]}},
                           ["server.kind", "server.extra_args"]),
    "a device the worker trusts": ({"device": "cuda:7", "trainer": {"gpus": [7], "require_gpu": False}},
                                   ["device", "trainer.gpus", "trainer.require_gpu"]),
    "more training processes than the worker has": ({"trainer": {"distributed": "ddp", "processes": 1024}},
                                                    ["trainer.distributed", "trainer.processes"]),
    "an MCP server smuggled inside the environment's options": (
        {"environment": {"options": {"server": {"transport": "http", "url": "{metadata}"}}}},
        ["environment.options.server"]),
    "the environment switched to the attacker's own code": ({"environment": {"kind": "external"}},
                                                            ["environment.kind"]),
    "the judge's endpoint": ({"judge": {"api_base": "{metadata}", "judge_model": "openai/x"}},
                             ["judge.api_base", "judge.judge_model"]),
    "a training section carrying a server": ({"grpo": {"beta": 0.04, "server": {"url": "{metadata}"}}},
                                             ["grpo.server"]),
}


def _fill(value, **names):
    return json.loads(json.dumps(value).replace("{metadata}", names["metadata"]).replace("{victim}", names["victim"]))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_ordinary_account_cannot_reach_what_the_launch_form_hides(attack):
    attacker, victim = attacker_signs_up(), victim_with_a_checkpoint()
    overrides, keys = ATTACKS[attack]
    with FakeMetadataService() as metadata:
        overrides = _fill(overrides, metadata=metadata.url, victim=str(victim.adapter_dir))
        api = attacker.api_launch(overrides)
        assert api.status_code == 400, api.content
        said = " ".join(api.json()["overrides"])
        form = attacker.form_launch(overrides)
        assert form.status_code == 400
        page = form.content.decode()
        typing = attacker.form_launch(overrides, _validate="1", HTTP_HX_REQUEST="true").content.decode()
        for key in keys:  # refused (or, where no such setting exists, unknown), the dotted key named
            refused = (f"{key} cannot be set here", f"{key}: Extra inputs are not permitted")
            assert any(r in said for r in refused), said
            assert any(r in page for r in refused)  # beside the Advanced (JSON) field
            assert any(r in typing for r in refused)  # and already while it is typed (htmx inline validation)
        assert not Run.objects.filter(project=attacker.project).exists()
    assert metadata.requests == []


def test_an_error_names_an_unknown_key_and_a_section_sent_as_a_value():
    attacker = attacker_signs_up()
    api = attacker.api_launch({"grpo": {"lr": 1}, "monitors": "off"})
    assert api.status_code == 400
    assert api.json()["overrides"] == ["grpo.lr: Extra inputs are not permitted (not a setting of the engine)",
                                       'monitors: give an object of its settings, e.g. {"monitors": {…}}']
    assert not Run.objects.exists()


def test_another_projects_checkpoint_cannot_be_forked_or_named():
    attacker, victim = attacker_signs_up(), victim_with_a_checkpoint()
    api = api_as(attacker.user)
    # By id: the victim's run and checkpoint do not exist for the attacker.
    assert api.post(f"/api/runs/{victim.run.id}/fork/", {"step": 1, "name": "stolen"},
                    format="json").status_code == 404
    pages = page_as(attacker.user)
    assert pages.get(reverse("run-fork", args=[victim.checkpoint.id])).status_code == 404
    assert pages.post(reverse("run-fork", args=[victim.checkpoint.id]),
                      {"name": "stolen", "steps": 1}).status_code == 404
    # By path, through a fork of the attacker's own checkpoint: refused, naming the key.
    own = victim_with_a_checkpoint(owner=attacker.user)
    stolen = {"init_checkpoint": str(victim.adapter_dir)}
    response = api.post(f"/api/runs/{own.run.id}/fork/", {"step": 1, "name": "f", "overrides": stolen}, format="json")
    assert response.status_code == 400 and "init_checkpoint cannot be set here" in str(response.json())
    form = pages.post(reverse("run-fork", args=[own.checkpoint.id]),
                      {"name": "f", "steps": 1, "overrides": json.dumps(stolen)})
    assert form.status_code == 400 and b"init_checkpoint cannot be set here" in form.content
    assert not Run.objects.filter(parent_run__isnull=False).exists()
    assert not Run.objects.filter(config__init_checkpoint=str(victim.adapter_dir)).exists()


def test_a_viewer_of_the_project_cannot_fork_it():
    victim = victim_with_a_checkpoint()
    viewer = member_factory(project=victim.project, role=Role.VIEWER)
    assert api_as(viewer).post(f"/api/runs/{victim.run.id}/fork/", {"step": 1, "name": "f"},
                               format="json").status_code == 403
    assert page_as(viewer).post(reverse("run-fork", args=[victim.checkpoint.id]),
                                {"name": "f", "steps": 1}).status_code == 403
    assert Run.objects.count() == 1


def test_a_fork_of_ones_own_checkpoint_starts_from_it_by_id_and_answers_no_path():
    mine = victim_with_a_checkpoint()  # the project's owner forks its own run
    response = api_as(mine.project.owner).post(f"/api/runs/{mine.run.id}/fork/",
                                               {"step": 1, "name": "fork", "overrides": {"grpo": {"beta": 0.04}}},
                                               format="json")
    assert response.status_code == 201, response.content
    fork = Run.objects.get(pk=response.json()["id"])
    # The path was read on the server from the checkpoint's id and frozen for the worker ...
    assert fork.config["init_checkpoint"] == mine.checkpoint.path and fork.parent_checkpoint == mine.checkpoint
    assert fork.config["grpo"]["beta"] == 0.04 and fork.status == RunStatus.QUEUED
    # ... and never travels back to people: the origin is the run and the step.
    assert response.json()["started_from"] == {"run": mine.run.id, "run_name": mine.run.name, "step": 1}
    assert mine.checkpoint.path not in response.content.decode() and fork.output_dir not in response.content.decode()
    assert Checkpoint.objects.count() == 1
