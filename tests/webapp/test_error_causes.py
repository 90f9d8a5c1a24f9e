"""A judge's failure is told by its cause (no key, refused key, unknown model, unreachable, rate-limited, server
error), with advice that fits it, on Test judge, the launch form and a failed run; "a failed run resumes from its
last checkpoint" is said only of a run that stopped mid-way, the one place where Resume does that."""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.judge_double import HttpError
from tests.webapp.factories import agent_factory, judge_factory, project_factory, run_factory, scenario_set_factory
from tests.ports import closed_port
from webapp.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def _test_judge(client, judge) -> str:
    return client.post(reverse("judge-test", args=[judge.pk])).content.decode()


@pytest.mark.parametrize("status, says, advice", [
    (401, "The judge&#x27;s API refused its key.", "Fix the key"),
    (404, "The judge&#x27;s API does not know this model or address.", "Check the judge&#x27;s model name"),
    (429, "The judge&#x27;s API is rate-limiting", "lower the judge&#x27;s concurrency"),
    (500, "The judge&#x27;s server answered with an error of its own", "try again later"),
])
def test_test_judge_names_what_the_judges_api_answered(client, judge_double, status, says, advice):
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base)
    judge_double.queue(HttpError(status))
    client.force_login(project.owner)
    html = _test_judge(client, judge)
    sentence = re.search(r'id="judge-test-error">(.*?)</p>', html, re.S).group(1)
    todo = re.search(r'id="judge-test-error-todo">(.*?)</p>', html, re.S).group(1)
    assert says in sentence and advice in todo
    assert "resumes from its last checkpoint" not in html


def test_test_judge_tells_a_missing_key_from_a_server_that_is_down(client, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    project = project_factory()
    client.force_login(project.owner)
    no_key = _test_judge(client, judge_factory(project=project, model="openai/gpt-4o-mini"))
    assert "The judge has no API key" in no_key and "could not be reached" not in no_key
    down = _test_judge(client, judge_factory(project=project, api_base=f"http://127.0.0.1:{closed_port()}/v1"))
    assert "The judge&#x27;s server could not be reached" in down and "no API key" not in down
    assert "resumes from its last checkpoint" not in no_key + down


def test_a_launch_refused_for_its_judge_does_not_talk_of_checkpoints(client, judge_double):
    project = project_factory()
    judge = judge_factory(project=project, api_base=judge_double.api_base)
    judge_double.queue(HttpError(429))
    client.force_login(project.owner)
    form = {"name": "r", "agent": agent_factory(project=project).id, "judge_config": judge.id, "steps": 2,
            "scenario_set": scenario_set_factory(project=project).id, "group_size": 2, "groups_per_step": 1,
            "learning_rate": 1e-4, "seed": 0}
    response = client.post(reverse("run-launch", args=[project.id]), form)
    html = response.content.decode()
    assert response.status_code == 400 and "rate-limiting" in html
    assert "resumes from its last checkpoint" not in html and Run.objects.count() == 0


SERVER_DOWN = ("TrainingError: 2 of 2 groups could not be scored in step 3; first error: JudgeError: judge "
               "openai/judge: the server could not be reached: InternalServerError persisted after 3 retries "
               "(litellm.InternalServerError: InternalServerError: OpenAIException - Connection error.); check "
               "that the server is up and the api_base is right")


def test_only_a_run_that_stopped_mid_way_is_told_it_resumes_from_its_last_checkpoint(client):
    mid_way = run_factory(status=RunStatus.FAILED, error=SERVER_DOWN, steps_done=2)
    at_start = run_factory(project=mid_way.project, status=RunStatus.FAILED, error=SERVER_DOWN, steps_done=0)
    client.force_login(mid_way.project.owner)
    stopped = client.get(f"/runs/{mid_way.id}/").content.decode()
    never_trained = client.get(f"/runs/{at_start.id}/").content.decode()
    assert "The judge&#x27;s server could not be reached" in stopped
    assert "resumes from its last checkpoint" in re.search(r'id="run-error-todo">(.*?)</p>', stopped, re.S).group(1)
    assert "The judge&#x27;s server could not be reached" in never_trained
    assert "resumes from its last checkpoint" not in never_trained


def test_the_causes_read_differently_and_the_tail_is_the_callers_choice():
    from webapp.user_errors import RESUMES, user_error

    texts = {
        "no key": "judge m: no API key was sent: InternalServerError (Missing credentials)",
        "refused": "judge m: the API refused the key: AuthenticationError (401)",
        "model": "judge m: the API does not know this model or address: NotFoundError (404)",
        "down": "judge m: the server could not be reached: InternalServerError persisted after 2 retries",
        "limited": "judge m: the API is rate-limiting: RateLimitError persisted after 2 retries",
        "5xx": "judge m: the server failed with an error of its own: InternalServerError persisted after 2 retries",
    }
    explained = {k: user_error(v) for k, v in texts.items()}
    assert len({e.what for e in explained.values()}) == len(texts)
    assert len({e.todo for e in explained.values()}) == len(texts)
    assert all(RESUMES not in e.todo for e in explained.values())
    assert user_error(texts["down"], resumable=True).todo.endswith(RESUMES)
