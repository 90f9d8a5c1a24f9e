"""Every place a person reads a judge explanation (the API, the export, the playground and Try it, which judge
with the labels given) reads the stable labels, lists and ranges included (judging.labels, one function)."""
from __future__ import annotations

import json

import pytest

import judging
from tests.webapp.factories import run_factory
from tests.webapp.judge_words import JUDGE_SAID, ORDER, PEOPLE_READ, SCORES, UNTRANSLATED, judged_group
from tests.webapp.test_review import _api
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db


def test_the_api_and_the_export_read_the_labels_in_lists_and_ranges(client):
    run = run_factory(status=RunStatus.COMPLETED)
    trajectories = judged_group(run)
    api = _api(run.project.owner)
    for t, expected in zip(trajectories, PEOPLE_READ):
        assert api.get(f"/api/trajectories/{t.id}/").json()["explanation"] == expected
    client.force_login(run.project.owner)
    export = b"".join(client.get(f"/runs/{run.id}/export.jsonl").streaming_content).decode()
    line = json.loads(export.splitlines()[0])
    assert [t["review"]["explanation"] for t in line["trajectories"]] == PEOPLE_READ
    assert not UNTRANSLATED.search(export)


async def test_a_judge_given_the_labels_answers_in_them_as_the_playground_and_try_it_use_it(judge_double):
    # The playground and Try it pass the labels to the judge; its reply (in its own numbers) comes back in them.
    judge_double.queue({"scores": [{"trajectory_id": str(p + 1), "score": SCORES[i], "explanation": JUDGE_SAID[i]}
                                   for p, i in enumerate(ORDER)]})
    groups = [[{"role": "user", "content": "Refund?"}, {"role": "assistant", "content": f"answer text {k}"}]
              for k in "wxyz"]
    # shuffle off: presentation order = input order, so order the inputs as the judge saw them
    shown = [groups[i] for i in ORDER]
    judgement = await judging.score_group(shown, judge_double.model, extra_litellm_params=judge_double.litellm_params,
                                          labels=[["A", "B", "C", "D"][i] for i in ORDER], shuffle=False, cache=False)
    by_label = dict(zip([["A", "B", "C", "D"][i] for i in ORDER], [s.explanation for s in judgement.scores]))
    assert [by_label[x] for x in "ABCD"] == PEOPLE_READ
