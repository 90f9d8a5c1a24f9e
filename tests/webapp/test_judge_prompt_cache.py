"""A run's judge prompt caching, as the run page and the API report it: the cacheable share of the judge's
input tokens, the tokens the provider served from its cache, and the cost with and without the cached price."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from training.events import GroupScored, JudgeUsage
from training.types import JudgeReport
from webapp.live.ingest import run_event_ingest
from webapp.models import RunStatus
from webapp.selectors.runs import run_judge_cost
from tests.webapp.factories import judge_factory, project_factory, run_factory

pytestmark = pytest.mark.django_db


def _judged_run(*calls: dict):
    project = project_factory()
    run = run_factory(project=project, status=RunStatus.RUNNING, judge_config=judge_factory(project=project))
    trajectories = [{"scenario_id": "s1", "messages": [{"role": "assistant", "content": f"answer {i}"}],
                     "env_reward": None, "judge_score": r, "explanation": "fine", "criteria": {}, "reward": r,
                     "advantage": r - 0.5, "error": None, "completion_tokens": 3, "metadata": {}}
                    for i, r in enumerate((0.2, 0.9))]
    run_event_ingest(run_id=run.id, event=GroupScored(step=1, group_index=0, scenario_id="s1",
                                                      trajectories=trajectories, reward_mean=0.55, reward_std=0.35,
                                                      skipped=False).to_dict())
    hits = sum(bool(c.get("cache_hit")) for c in calls)
    report = JudgeReport(judge_model="anthropic/claude-sonnet-4-5", calls=list(calls), requests=len(calls) - hits,
                         cache_hits=hits)
    run_event_ingest(run_id=run.id, event=JudgeUsage(step=1, group_index=0, report=report).to_dict())
    return project, run


def test_the_run_reports_its_cacheable_prompt_share_and_its_cost_with_and_without_cached_tokens(client):
    # the first call writes 1024 tokens to the provider's cache (billed above the input price), the second reads
    # them from it; the third came from our own judge cache (not sent: counted nowhere)
    call = {"prompt_tokens": 2000, "prefix_tokens": 1200, "counted_tokens": 2000, "uncached_cost_usd": 0.0040}
    project, run = _judged_run({**call, "cost_usd": 0.0043, "cache_write_tokens": 1024},
                               {**call, "cost_usd": 0.0025, "cached_tokens": 1024},
                               {**call, "cost_usd": 0.0025, "cached_tokens": 1024, "cache_hit": True})

    cost = run_judge_cost(run=run)
    assert cost["calls"] == 2 and cost["cacheable_share"] == pytest.approx(0.6)
    assert cost["cached_tokens"] == 1024 and cost["cached_share"] == pytest.approx(1024 / 4000)
    assert cost["cache_write_tokens"] == 1024
    assert cost["cost_usd"] == pytest.approx(0.0068) and cost["uncached_cost_usd"] == pytest.approx(0.0080)
    api = APIClient()
    api.force_authenticate(project.owner)
    assert api.get(f"/api/runs/{run.id}/").json()["judge_cost"] == pytest.approx(cost)
    client.force_login(project.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    line = page.split('id="judge-prompt-cache">')[1].split("</span>")[0]
    assert "60% of the judge's input tokens are the run's constant prefix" in line
    assert "served 1024 tokens (26%) from its cache" in line
    assert "served 1024 tokens (26%) from its cache and wrote 1024 tokens to it" in line
    assert "billed $0.0068 with the cache's prices (reads cheaper, writes dearer), $0.0080 at the plain input" in line


def test_calls_recorded_without_a_prefix_count_show_no_cache_line_and_no_made_up_saving(client):
    project, run = _judged_run({"prompt_tokens": 90, "cost_usd": 0.01})  # recorded before prompt caching

    cost = run_judge_cost(run=run)
    assert cost["cacheable_share"] is None and cost["uncached_cost_usd"] is None and cost["cost_usd"] == 0.01
    client.force_login(project.owner)
    assert 'id="judge-prompt-cache"' not in client.get(f"/runs/{run.pk}/").content.decode()
