"""One judge request for training and the playground: the same litellm parameters (temperature 0 included) and
byte-identical request bodies for the same group and rubric, captured at the HTTP judge double."""
from __future__ import annotations

import asyncio
import json

import pytest

from studio.scoring import judge_scorer_from_config
from tests.judge_double import JudgeDouble
from tests.webapp.factories import judge_factory, project_factory, rubric_factory, run_factory, scenario_set_factory
from training.config import parse_run_config
from training.types import Scenario as EngineScenario
from training.types import Trajectory as EngineTrajectory
from training.types import TrajectoryGroup as EngineGroup
from webapp.execution.executors import wait_idle
from webapp.live.ingest import run_event_ingest
from webapp.models import Rescore, RunStatus, TrajectoryGroup
from webapp.services.playground import playground_create

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "description": "Find an order.",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]


def _answer(text: str) -> list[dict]:
    return [{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": "Refund policy?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "lookup_order", "arguments": '{"id": "42"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "lookup_order", "content": "order 42: a lamp"},
            {"role": "assistant", "content": text}]


def _judge_run(double: JudgeDouble, monkeypatch, reference: str = "", **judge_fields):
    monkeypatch.setenv("JUDGE_DOUBLE_API_KEY", "test")
    project = project_factory()
    scenario_set = scenario_set_factory(project=project)
    scenario_set.scenarios.update(reference=reference)
    judge = judge_factory(project=project, model=double.model, api_base=double.api_base,
                          api_key_env="JUDGE_DOUBLE_API_KEY", **judge_fields)
    rubric = rubric_factory(project=project, text="Prefer answers that cite the 30-day policy.")
    run = run_factory(project=project, scenario_set=scenario_set, judge_config=judge,
                      rubric_version=rubric.latest_version, status=RunStatus.COMPLETED)
    return run, judge, rubric


def test_a_judge_temperature_of_zero_is_kept_in_the_run_config(judge_double, monkeypatch):
    run, _, _ = _judge_run(judge_double, monkeypatch, temperature=0.0)

    assert run.config["judge"]["temperature"] == 0.0


def test_training_and_the_playground_send_byte_identical_requests(judge_double, inprocess_executor, monkeypatch,
                                                                   tmp_path):
    run, judge, rubric = _judge_run(judge_double, monkeypatch, reference="Refunds within 30 days of purchase.",
                                    temperature=0.0)
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.9 if "30 days" in text else 0.2)
    config = parse_run_config(run.config)
    scenario = next(s for s in config.scenarios if s.id == "s1")
    assert scenario.reference == "Refunds within 30 days of purchase."

    # Training: the engine's group, scored by the scorer the engine child builds from the run config.
    group = EngineGroup(scenario=EngineScenario(id=scenario.id, user_message=scenario.user_message,
                                                reference=scenario.reference), trajectories=[
        EngineTrajectory(scenario_id="s1", messages=_answer(a), tools=TOOLS)
        for a in ("Within 30 days.", "No idea.", "Ask the shop.")])
    scores = asyncio.run(judge_scorer_from_config(run.config["judge"])(group))
    for t, s in zip(group.trajectories, scores):
        t.reward, t.judge_score = s.reward, s.judge_score
    run_event_ingest(run_id=run.id, event={
        "kind": "group_scored", "step": 1, "group_index": 0, "scenario_id": "s1",
        "trajectories": [t.to_dict() for t in group.trajectories], "reward_mean": 0.4, "reward_std": 0.3,
        "skipped": False})

    # The playground, on the stored group, with the same rubric (and a fresh cache, so it really sends).
    monkeypatch.setenv("RUBRIC_STUDIO_JUDGE_CACHE", str(tmp_path / "playground-cache"))
    stored = TrajectoryGroup.objects.get(run=run, step_index=1, index=0)
    rescore = playground_create(user=run.project.owner, project=run.project, group_ids=[stored.id],
                                rubric_text=rubric.latest_version.text, judge_config=judge)
    wait_idle(timeout=60)
    rescore.refresh_from_db()
    assert rescore.status == Rescore.Status.DONE, rescore.error

    training, playground = judge_double.requests
    assert json.dumps(playground.body) == json.dumps(training.body)
    assert training.body["temperature"] == 0.0
    assert "lookup_order" in training.prompt_text and "Refunds within 30 days" in training.prompt_text
