"""A step stopped at its review (a park), or because the judge's provider is down, is taken up by the next engine
with the same groups: nothing is rolled out again, nothing scored is judged again, the reviewed rewards train,
and the kept step is gone once it trained. The real loop on the tiny model (training/parking); the judge is
the real judge scorer against the HTTP judge double."""
from __future__ import annotations

from training.events import (GroupRolledOut, GroupScored, JudgeUnavailable, ReviewApplied, ReviewRequested, RunFinished,
                             RunStarted, StaticControl, TrainStep)
from training import run
from training.rl.grpo import group_advantages
from training.rl.parking import FILE

from tests.training.configs import small_config
from tests.training.test_loop import Recorder


def test_a_step_parked_at_its_review_trains_on_the_same_groups_with_the_reviewed_rewards(tiny_model_dir, tmp_path):
    config = small_config(tiny_model_dir, tmp_path, steps=1)
    control = StaticControl()
    first, seen = Recorder(), []

    async def park(step, groups):  # the person is away: the worker stops the engine while it waits
        seen.extend([t.messages[-1]["content"] for t in g.trajectories] for g in groups)
        control.set("cancel")

    summary = run(config, review=park, sink=first, control=control)
    assert summary.status == "cancelled" and summary.steps_done == 0
    assert (tmp_path / FILE).exists() and not first.of(ReviewApplied) and not first.of(TrainStep)
    assert len(first.of(GroupScored)) == 2

    second, answered = Recorder(), []

    async def approve(step, groups):  # the reviewer's rewards: the first answer of each group is the best
        answered.extend([t.messages[-1]["content"] for t in g.trajectories] for g in groups)
        for g in groups:
            for i, t in enumerate(g.trajectories):
                t.reward = 1.0 if i == 0 else 0.0

    summary = run(config, review=approve, sink=second)
    assert summary.status == "completed" and summary.steps_done == 1
    started = second.of(RunStarted)[0]
    assert (started.start_step, started.scored_step) == (1, 1)
    assert not second.of(GroupRolledOut) and not second.of(GroupScored)  # nothing rolled out or judged again
    assert answered == seen  # the very answers reviewed before the park
    assert [e.step for e in second.of(ReviewRequested)] == [1]
    applied = second.of(ReviewApplied)[0].groups
    assert [g["advantages"] for g in applied] == [group_advantages([1.0, 0.0, 0.0, 0.0]).tolist()] * 2
    assert second.of(TrainStep)[0].metrics["trained_sequences"] == 8
    assert second.of(RunFinished)[0].status == "completed" and not (tmp_path / FILE).exists()


def test_a_judge_that_answers_503_stops_the_step_and_the_next_engine_judges_only_what_was_not_scored(
        tiny_model_dir, tmp_path):
    from studio.scoring import judge_scorer_from_config
    from tests.judge_double import HttpError, JudgeDouble, marker_or_brevity

    score = JudgeDouble.score_by(marker_or_brevity)
    down = {"on": True}

    def respond(request):  # the first group is scored, then the provider goes down
        return HttpError(503, "overloaded") if down["on"] and len(double.requests) > 1 else score(request)

    config = small_config(tiny_model_dir, tmp_path, steps=1, pipeline={"enabled": False})
    with JudgeDouble(responder=respond) as double:
        options = {"judge_model": double.model, "api_base": double.api_base, "cache": False,
                   "transport_retries": 0}
        first = Recorder()
        summary = run(config, scorer=judge_scorer_from_config(options, api_key="test"), sink=first)
        assert summary.status == "cancelled" and summary.steps_done == 0  # stopped, not failed
        outage = first.of(JudgeUnavailable)[0]
        assert (outage.step, outage.detail, outage.groups) == (1, f"{double.model} answered 503", 1)
        assert (tmp_path / FILE).exists() and not first.of(TrainStep) and len(double.requests) == 2
        scored = [e for e in first.of(GroupScored) if not e.scoring_error]
        assert len(scored) == 1

        down["on"] = False  # the provider is back
        second = Recorder()
        summary = run(config, scorer=judge_scorer_from_config(options, api_key="test"), sink=second)
    assert summary.status == "completed" and summary.steps_done == 1
    assert second.of(RunStarted)[0].scored_step == 1 and not second.of(GroupRolledOut)
    # Only the group the judge could not score was sent again; the scored one kept its scores.
    assert len(double.requests) == 3
    assert [e.group_index for e in second.of(GroupScored)] == [1 - scored[0].group_index]
    assert second.of(TrainStep)[0].metrics["trained_sequences"] == 8 and not (tmp_path / FILE).exists()
