"""A worker's judge key goes only where an administrator allowed it: editors choose among the bound pairs, and
the engine and the playground worker refuse a mismatch even if one reached them."""
from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from judging import JudgeError
from studio.key_policy import POLICY_ENV
from studio.scoring import JudgeScorer, JudgeScorerOptions
from tests.judge_double import JudgeDouble
from tests.webapp.factories import agent_factory, project_factory, scenario_set_factory
from webapp.execution.runner import engine_env
from webapp.forms import JudgeConfigForm
from webapp.models import Run
from webapp.services import catalogue
from webapp.services.runs import run_launch

pytestmark = pytest.mark.django_db

OPENAI = "https://api.openai.com/v1"
EVIL = "https://collector.example/v1"


@pytest.fixture
def policy(settings):
    settings.STUDIO_JUDGE_KEY_ENDPOINTS = {"OPENAI_API_KEY": (OPENAI,), "GROQ_API_KEY": ("",)}
    return settings.STUDIO_JUDGE_KEY_ENDPOINTS


def _judge(project, name="j", **fields):
    return catalogue.judge_config_create(user=project.owner, project=project, name=name, model="openai/gpt-4o-mini",
                                         **fields)


def test_a_judge_cannot_send_a_bound_key_to_another_endpoint(policy):
    project = project_factory()
    with pytest.raises(ValidationError) as err:
        _judge(project, api_key_env="OPENAI_API_KEY", api_base=EVIL)
    assert "OPENAI_API_KEY may only be sent to https://api.openai.com/v1" in str(err.value)
    with pytest.raises(ValidationError, match="not one an administrator allowed"):
        _judge(project, api_key_env="ANTHROPIC_API_KEY", api_base="")
    assert not project.judge_configs.exists()
    assert _judge(project, api_key_env="OPENAI_API_KEY", api_base=OPENAI + "/").api_key_env == "OPENAI_API_KEY"
    assert _judge(project, name="g", api_key_env="GROQ_API_KEY", api_base="").api_key_env == "GROQ_API_KEY"


def test_editing_a_judge_cannot_move_its_key_elsewhere(policy):
    project = project_factory()
    judge = _judge(project, api_key_env="OPENAI_API_KEY", api_base=OPENAI)
    with pytest.raises(ValidationError):
        catalogue.judge_config_update(user=project.owner, judge=judge, api_base=EVIL)
    judge.refresh_from_db()
    assert judge.api_base == OPENAI


def test_with_no_policy_no_key_variable_may_be_named_but_a_stored_key_still_works(settings):
    settings.STUDIO_JUDGE_KEY_ENDPOINTS = {}
    project = project_factory()
    with pytest.raises(ValidationError, match="none are configured"):
        _judge(project, api_key_env="OPENAI_API_KEY", api_base=OPENAI)
    assert _judge(project, api_key="sk-own", api_base=EVIL).has_stored_key


def test_a_run_override_cannot_redirect_the_judge_key(policy):
    project = project_factory()
    judge = _judge(project, api_key_env="OPENAI_API_KEY", api_base=OPENAI)
    with pytest.raises(ValidationError, match="judge.api_base cannot be set here"):
        run_launch(user=project.owner, project=project, name="r", agent=agent_factory(project=project),
                   scenario_set=scenario_set_factory(project=project), judge_config=judge, steps=1, group_size=2,
                   groups_per_step=1, learning_rate=1e-3, overrides={"judge": {"api_base": EVIL}})
    assert not project.runs.exists()


def test_the_judge_form_offers_only_the_bound_key_variables(policy):
    choices = dict(JudgeConfigForm().fields["api_key_env"].choices)
    assert set(choices) == {"", "OPENAI_API_KEY", "GROQ_API_KEY"}
    assert OPENAI in choices["OPENAI_API_KEY"]
    form = JudgeConfigForm(data={"name": "j", "model": "m", "api_key_env": "SECRET_API_KEY", "temperature": 0,
                                 "passes": 1, "concurrency": 1})
    assert not form.is_valid() and "api_key_env" in form.errors


def test_the_engine_refuses_a_key_sent_to_an_endpoint_the_policy_does_not_allow(policy, monkeypatch):
    env = engine_env(Run())  # a run without a judge: the policy travels all the same
    assert json.loads(env[POLICY_ENV]) == {"OPENAI_API_KEY": [OPENAI], "GROQ_API_KEY": [""]}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker")
    monkeypatch.setenv(POLICY_ENV, env[POLICY_ENV])
    with pytest.raises(JudgeError, match="may only be sent to"):
        JudgeScorer(JudgeScorerOptions(judge_model="openai/gpt-4o-mini", api_key_env="OPENAI_API_KEY",
                                       api_base=EVIL))
    assert JudgeScorer(JudgeScorerOptions(judge_model="openai/gpt-4o-mini", api_key_env="OPENAI_API_KEY",
                                          api_base=OPENAI))


def test_the_form_offers_exactly_the_key_variables_that_saving_test_judge_and_launch_accept(
        judge_double, settings, monkeypatch):
    """Issue 43: the demo's key variable (added to the policy by settings, not in the raw variable the web
    process's scorer read) was offered, then refused by Test judge and launch; a variable not ending in _API_KEY
    was offered, then refused on save. One rule (webapp/judge_keys.py) now decides all of them."""
    from webapp.services.judge_probe import judge_config_reachable_check, judge_config_test

    raw = {"OPENAI_API_KEY": [OPENAI], "DATABASE_URL": [""]}  # what the administrators set in the environment
    monkeypatch.setenv(POLICY_ENV, json.dumps(raw))
    settings.STUDIO_JUDGE_KEY_ENDPOINTS = {"OPENAI_API_KEY": (OPENAI,), "DATABASE_URL": ("",),
                                           "DEMO_JUDGE_API_KEY": (judge_double.api_base,)}  # + the demo's binding
    monkeypatch.setenv("DEMO_JUDGE_API_KEY", "sk-demo")
    offered = {key for key, _ in JudgeConfigForm().fields["api_key_env"].choices} - {""}
    assert offered == {"OPENAI_API_KEY", "DEMO_JUDGE_API_KEY"}

    project = project_factory()
    demo = catalogue.judge_config_create(user=project.owner, project=project, name="demo", model=judge_double.model,
                                         api_key_env="DEMO_JUDGE_API_KEY", api_base=judge_double.api_base)
    with pytest.raises(ValidationError, match="ending in _API_KEY"):
        _judge(project, name="db", api_key_env="DATABASE_URL", api_base="")
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.5)
    tested = judge_config_test(user=project.owner, judge=demo)
    assert tested["ok"], tested["error"]
    judge_config_reachable_check(user=project.owner, judge=demo)  # launch's check: no refusal
    assert "DATABASE_URL" not in json.loads(engine_env(Run(judge_config=demo))[POLICY_ENV])
