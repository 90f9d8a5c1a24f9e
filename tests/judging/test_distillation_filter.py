"""Distillation with the rubric as the filter, over real HTTP and real litellm on both sides: a teacher double
answers each scenario n times (through studio.teacher.TeacherClient, as the web app calls a teacher), the judge
double ranks the group against the rubric, and training.sft.distill keeps the judge's best answer when it reaches
the threshold."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from studio.scoring import judge_scorer_from_config
from studio.teacher import TeacherBudgetSpent, TeacherClient
from tests.judge_double import JudgeDouble
from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.sft.distill import distil
from training.types import Scenario

SCENARIOS = [Scenario(id="refunds", user_message="What is the refund policy?"),
             Scenario(id="hours", user_message="When are you open?"),
             Scenario(id="weather", user_message="Will it rain tomorrow?")]
# The teacher's answers, by question: one good answer (GOOD), the rest weak; the weather has no good answer.
ANSWERS = {"refund": ["Refunds? Maybe.", "GOOD: within 30 days of purchase.", "Ask someone.", "No idea."],
           "open": ["GOOD: 9 to 5 on weekdays.", "Sometimes.", "Often.", "Rarely."],
           "rain": ["Perhaps.", "Who knows.", "Maybe not.", "Possibly."]}


def teacher_responder():
    turns = {key: itertools.cycle(values) for key, values in ANSWERS.items()}

    def respond(request):
        question = request.messages[-1]["content"]
        key = next(k for k in ANSWERS if k in question)
        return next(turns[key])

    return respond


def chat_rollout() -> tuple:
    env = get_environment("chat")
    return env, RolloutConfig("Answer the customer.", SamplingConfig(temperature=1.0, max_tokens=64),
                              parse_options(env, {}))


def test_the_filter_keeps_the_judges_best_answer_and_drops_scenarios_below_the_threshold(judge_double):
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.9 if "GOOD" in text else 0.3)
    env, rollout = chat_rollout()
    with JudgeDouble(responder=teacher_responder()) as teacher_api:
        teacher = TeacherClient(model=teacher_api.model, params=teacher_api.litellm_params)
        scorer = judge_scorer_from_config({"judge_model": judge_double.model, "api_base": judge_double.api_base,
                                           "rubric": "Prefer the answer marked GOOD.", "shuffle": True},
                                          api_key="test")
        results = asyncio.run(distil(scenarios=SCENARIOS, env=env, client=teacher, model="teacher", n=4,
                                     rollout_config=rollout, scorer=scorer, threshold=0.5, concurrency=1))
    by_id = {r.scenario_id: r for r in results}
    for scenario_id in ("refunds", "hours"):
        chosen = by_id[scenario_id]
        assert chosen.candidates == 4 and chosen.judge_score == pytest.approx(0.9)
        assert chosen.messages[-1]["content"].startswith("GOOD:")  # the judge's best, wherever it was shown
        assert chosen.messages[:2] == [{"role": "system", "content": "Answer the customer."},
                                       {"role": "user", "content": SCENARIOS[0 if scenario_id == "refunds" else 1]
                                        .user_message}]
        assert sorted(chosen.rewards) == pytest.approx([0.3, 0.3, 0.3, 0.9])
    weather = by_id["weather"]
    assert weather.chosen is None and "below the threshold 0.500" in weather.error
    # The teacher was asked 4 times per scenario; the judge saw each scenario's 4 answers in one request.
    assert teacher.requests == 12 and teacher.completion_tokens == 12 * 30
    assert [len(r.trajectory_blocks()) for r in judge_double.requests] == [4, 4, 4]
    assert all("Prefer the answer marked GOOD." in r.prompt_text for r in judge_double.requests)


def test_a_priced_teacher_stops_at_its_budget_and_says_so(judge_double):
    judge_double.responder = JudgeDouble.score_by(lambda text: 0.9 if "GOOD" in text else 0.3)
    env, rollout = chat_rollout()
    with JudgeDouble(responder=teacher_responder(), usage=(1000, 1000)) as teacher_api:
        # A model litellm has a price for: its cost is counted from the reported tokens.
        teacher = TeacherClient(model="openai/gpt-4o-mini", params=teacher_api.litellm_params, budget_usd=0.002,
                                concurrency=1)
        scorer = judge_scorer_from_config({"judge_model": judge_double.model, "api_base": judge_double.api_base},
                                          api_key="test")
        results = asyncio.run(distil(scenarios=SCENARIOS, env=env, client=teacher, model="teacher", n=4,
                                     rollout_config=rollout, scorer=scorer, threshold=0.5, concurrency=1,
                                     should_stop=lambda: teacher.spent))
    assert teacher.cost_usd > 0.002 and teacher.spent  # (1000 + 4000 tokens at 4o-mini's price) × 4 passes it
    assert len(results) == 1  # the first scenario spent it; no other one started
    with pytest.raises(TeacherBudgetSpent):
        asyncio.run(teacher.create(model="teacher", messages=[{"role": "user", "content": "more?"}]))
