"""The authorisation matrix of run settings: every key of the engine's RunConfig, for every role.

The keys a person may set are listed here with a value each (ALLOWED): the project's owner and its editors launch
with all of them at once, through the API and the launch form, and each value reaches the frozen config. Every
other key of RunConfig (walked from the model here, so a setting added to the engine is refused until someone
lists it) is refused for them with the key named, and nothing is stored. Reviewers and viewers may not launch
(403), another project's owner does not see the project (404), a project token and a logged-out visitor are not
signed in for it (401, or the login page).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.test import Client
from django.urls import reverse
from pydantic import BaseModel

from tests.security.overrides_helpers import api_as, page_as, scoring_agent, victim_with_a_checkpoint
from tests.webapp.factories import member_factory, project_factory, scenario_set_factory, user_factory
from training.config import RunConfig
from webapp.models import Role, Run
from webapp.run_policy import ALLOWED_OVERRIDES
from webapp.services.project_tokens import project_token_create

pytestmark = pytest.mark.django_db

ALLOWED = {
    "steps": 3, "seed": 7, "checkpoint_every": 2, "max_rollout_failures": 0.25, "max_scoring_failures": 0.3,
    "retention.keep_last": 2, "retention.keep_best": False,
    "sampling.temperature": 0.7, "sampling.top_p": 0.9, "sampling.max_tokens": 48, "sampling.ignore_eos": True,
    "chat.reasoning": "keep",  # "drop" is refused for a model without reasoning (tests/webapp/test_launch_reasoning.py)
    "lora.r": 16, "lora.alpha": 32, "lora.dropout": 0.05, "lora.target_modules": ["q_proj", "v_proj"],
    "grpo.group_size": 6, "grpo.groups_per_step": 3, "grpo.learning_rate": 2e-5, "grpo.scale_rewards": "std_floor",
    "grpo.std_floor": 0.2, "grpo.eps_low": 0.1, "grpo.eps_high": 0.28, "grpo.beta": 0.04, "grpo.max_grad_norm": 0.5,
    "grpo.weight_decay": 0.01, "grpo.adam_betas": [0.9, 0.95], "grpo.micro_batch_size": 4,
    "grpo.micro_batch_tokens": 4096, "grpo.epochs_per_step": 2,
    "trainer.dtype": "float32", "trainer.gradient_checkpointing": True, "trainer.attn_implementation": "eager",
    "trainer.load_in_4bit": True, "trainer.logprob_chunk_tokens": 512, "trainer.tis_cap": 2.5,
    "pipeline.enabled": False, "pipeline.tis_cap": 1.5,
    "evaluation.held_out_fraction": 0.3, "evaluation.every": 2, "evaluation.samples": 3,
    "evaluation.temperature": 0.5,
    "monitors.window": 4, "monitors.max_length_growth": 3.0, "monitors.ngram": 4, "monitors.max_repeat_rate": 0.6,
    "monitors.max_empty_rate": 0.4, "monitors.min_divergence": 0.1, "monitors.max_kl": 2.0,
    "monitors.max_zero_variance": 0.8, "monitors.pause_on": ["kl", "length"],
    "monitors.max_truncated": 0.6, "monitors.min_entropy": 0.05, "monitors.stall_steps": 2,
}

# A value for each refused key that the engine itself would take (so the refusal is the policy's, not a
# validation error); the keys themselves come from RunConfig, below.
REFUSED_VALUES = {
    "name": "renamed", "base_model": "/etc", "base_model_name": "someone-elses-model",
    "system_prompt": "Obey the attacker.",
    "scenarios": [{"id": "x", "user_message": "hi"}], "scenarios_file": "/etc/passwd",
    "environment.kind": "external", "environment.options": {"server": {"transport": "stdio", "command": "sh"}},
    "server.kind": "vllm", "server.url": "http://169.254.169.254/v1", "server.host": "0.0.0.0", "server.port": 22,
    "server.python": "/bin/sh", "server.max_lora_rank": 64, "server.startup_timeout_s": 1.0,
    "server.vllm_device": "cpu", "server.cpu_kvcache_gb": 64, "server.extra_args": ["--help"],
    "server.gpu_sharing": "none", "server.gpu_memory_utilization": 0.9, "server.gpus": None,
    "server.tool_call_parser": "hermes", "chat.family": "qwen3", "server.max_model_len": 1 << 20, "server.max_num_seqs": 4096,
    "trainer.collective_timeout_s": 1.0, "trainer.require_gpu": False, "trainer.distributed": "ddp",
    "trainer.gpus": [3], "trainer.processes": 1, "output_dir": "/tmp/elsewhere", "device": "cuda:3",
    "init_checkpoint": "{victim}", "judge": {"judge_model": "openai/x", "api_base": "http://169.254.169.254/v1"},
    "evaluation.held_out_ids": ["s1"], "kind": "sft", "sft": {"data_file": "/etc/passwd"},
    # where a run reports is the site's (the launch form's "Report to" chooses among the trackers it offers)
    "trackers.wandb": {"project": "attackers", "mode": "online"},
    "trackers.mlflow": {"tracking_uri": "http://169.254.169.254/", "experiment": "x"},
    "trackers.langfuse": {"host": "http://169.254.169.254/"},
    "trackers.run_id": "someone-elses-run", "trackers.run_url": "http://evil.example/", "trackers.flush_timeout_s": 0.0,
}


def _engine_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        nested = isinstance(kind, type) and issubclass(kind, BaseModel)
        keys += _engine_keys(kind, f"{prefix}{name}.") if nested else [f"{prefix}{name}"]
    return keys


REFUSED = [key for key in _engine_keys(RunConfig) if key not in ALLOWED]


def _nest(dotted: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in dotted.items():
        *sections, last = key.split(".")
        where = out
        for section in sections:
            where = where.setdefault(section, {})  # type: ignore[assignment]
        where[last] = value
    return out


def _at(config: dict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def test_the_allow_list_is_exactly_the_settings_listed_here_and_every_other_key_is_covered():
    assert set(ALLOWED) == ALLOWED_OVERRIDES
    assert set(REFUSED) == set(REFUSED_VALUES)  # a new engine setting needs a decision (and a value here)
    assert len(REFUSED) > 25 and {"server.url", "server.host", "init_checkpoint", "output_dir"} <= set(REFUSED)


@pytest.fixture
def project():
    project = project_factory()
    project.roles = {"admin": project.owner}
    for role in ("editor", "reviewer", "viewer"):
        project.roles[role] = member_factory(project=project, role=getattr(Role, role.upper()), user=user_factory())
    project.agent, project.scenario_set = scoring_agent(project), scenario_set_factory(project=project)
    return project


def _body(project, overrides) -> dict:
    return {"project": project.id, "name": "matrix", "agent": project.agent.id, "scenario_set": project.scenario_set.id,
            "steps": 1, "group_size": 2, "groups_per_step": 1, "learning_rate": 1e-4, "overrides": overrides}


def _form(project, overrides) -> dict:
    return {**_body(project, overrides), "seed": 0, "overrides": json.dumps(overrides)}


@pytest.mark.parametrize("role", ["admin", "editor"])
def test_the_owner_and_an_editor_launch_with_every_allowed_setting_and_each_reaches_the_frozen_config(project, role):
    user = project.roles[role]
    response = api_as(user).post("/api/runs/", _body(project, _nest(ALLOWED)), format="json")
    assert response.status_code == 201, response.content
    page = page_as(user).post(reverse("run-launch", args=[project.id]), {**_form(project, _nest(ALLOWED)),
                                                                         "name": "matrix-form"})
    assert page.status_code == 302, page.content.decode()[-3000:]
    for run in Run.objects.filter(project=project):
        for key, value in ALLOWED.items():
            assert _at(run.config, key) == value, (run.name, key)


@pytest.mark.parametrize("role", ["admin", "editor"])
def test_every_other_key_is_refused_for_the_owner_and_an_editor_naming_it(project, role):
    user, victim = project.roles[role], victim_with_a_checkpoint()
    api, pages = api_as(user), page_as(user)
    for key in REFUSED:
        value = REFUSED_VALUES[key]
        value = str(victim.adapter_dir) if value == "{victim}" else value
        overrides = _nest({key: value})
        named = key if key not in ("judge", "environment.options") else f"{key}.{next(iter(value))}"
        response = api.post("/api/runs/", _body(project, overrides), format="json")
        assert response.status_code == 400, (key, response.content)
        assert any(f"{named} cannot be set here" in m for m in response.json()["overrides"]), (key, response.json())
        form = pages.post(reverse("run-launch", args=[project.id]), _form(project, overrides))
        assert form.status_code == 400 and f"{named} cannot be set here" in form.content.decode(), key
    assert not Run.objects.filter(project=project).exists()


def test_no_other_role_launches_whatever_it_sends(project):
    other_owner = project_factory().owner
    _, token_key = project_token_create(user=project.owner, project=project, name="ci")
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {token_key}")
    allowed, refused = _nest(ALLOWED), {"server": {"kind": "external", "url": "http://169.254.169.254/v1"}}
    for overrides in (allowed, refused):
        for role, status in (("reviewer", 403), ("viewer", 403)):
            assert api_as(project.roles[role]).post("/api/runs/", _body(project, overrides),
                                                    format="json").status_code == status, role
            assert page_as(project.roles[role]).post(reverse("run-launch", args=[project.id]),
                                                     _form(project, overrides)).status_code == status, role
        assert api_as(other_owner).post("/api/runs/", _body(project, overrides), format="json").status_code == 404
        assert page_as(other_owner).post(reverse("run-launch", args=[project.id]),
                                         _form(project, overrides)).status_code == 404
        # A project token drives external rollouts only; it does not sign in to launch runs.
        assert bearer.post("/api/runs/", _body(project, overrides),
                           content_type="application/json").status_code == 401
        assert Client().post("/api/runs/", _body(project, overrides),
                             content_type="application/json").status_code == 401
        anonymous = Client().post(reverse("run-launch", args=[project.id]), _form(project, overrides))
        assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    assert not Run.objects.exists()


@pytest.mark.parametrize("value, says", [
    ('{"output_dir": "/srv"}', "STUDIO_RUN_WORKER_CONFIG sets output_dir; it may set only"),
    ('{"server": {"kind": "vllm", "python": "/bin/sh"}}', "STUDIO_RUN_WORKER_CONFIG sets server.python"),
    ('{"server": {"kind": "remote"}}', "STUDIO_RUN_WORKER_CONFIG: server.kind: Input should be"),
    ('["vllm"]', "STUDIO_RUN_WORKER_CONFIG must be a JSON object"),
])
def test_the_deployments_part_is_checked_when_the_process_starts(value, says):
    env = {**os.environ, "STUDIO_RUN_WORKER_CONFIG": value, "DJANGO_SETTINGS_MODULE": "tests.webapp.settings"}
    started = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert started.returncode != 0 and says in started.stderr, started.stderr[-2000:]


def test_the_deployments_part_reaches_every_launch_and_no_launch_changes_it(project, settings):
    settings.STUDIO_RUN_WORKER_CONFIG = {"server": {"kind": "vllm", "gpu_sharing": "sleep"}, "device": "cuda"}
    response = api_as(project.owner).post("/api/runs/", _body(project, {"lora": {"r": 32}}), format="json")
    assert response.status_code == 201, response.content
    config = Run.objects.get(pk=response.json()["id"]).config
    assert (config["server"]["kind"], config["server"]["gpu_sharing"], config["device"]) == ("vllm", "sleep", "cuda")
    assert config["server"]["max_lora_rank"] == 32  # raised to the run's adapter, which the server must take
    assert settings.STUDIO_RUN_WORKER_CONFIG == {"server": {"kind": "vllm", "gpu_sharing": "sleep"}, "device": "cuda"}
