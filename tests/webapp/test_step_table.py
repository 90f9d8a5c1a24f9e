"""The run page's step table shows what pipelined steps report: each step's staleness and importance weight."""
from __future__ import annotations

import re

import pytest

from tests.webapp.factories import run_factory
from webapp.models import RunStatus, Step

pytestmark = pytest.mark.django_db


def _cells(html: str, index: int) -> list[str]:
    row = re.search(rf'<tr id="step-{index}">(.*?)</tr>', html, re.S)
    assert row, f"no row for step {index}"
    return [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


def test_the_step_table_shows_each_steps_staleness_and_importance_weight(client):
    run = run_factory(status=RunStatus.RUNNING, steps=3)
    Step.objects.create(run=run, index=1, metrics={"reward_mean": 0.5, "staleness": 0, "is_weight_mean": None})
    Step.objects.create(run=run, index=2, metrics={"reward_mean": 0.6, "staleness": 1, "is_weight_mean": 1.00421})
    Step.objects.create(run=run, index=3, metrics={"reward_mean": 0.7})  # recorded before steps reported them
    client.force_login(run.project.owner)
    html = client.get(f"/runs/{run.id}/steps/").content.decode()
    headers = re.findall(r"<th[^>]*>(.*?)</th>", html)
    stale, weight = headers.index("Stale"), headers.index("IS weight")
    assert [_cells(html, i)[stale] for i in (1, 2, 3)] == ["0", "1", "—"]
    assert [_cells(html, i)[weight] for i in (1, 2, 3)] == ["—", "1.004", "—"]
