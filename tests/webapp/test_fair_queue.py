"""The fair queue (issue 47): a resuming run goes ahead of runs not started yet, then the project's priority (its
owner's choice within the site's bounds), then launch order; a project at its cap of runs in flight waits. The
workers take runs in exactly the order the run pages say."""
from __future__ import annotations

import re

import pytest
from django.utils import timezone

from tests.webapp.factories import member_factory, project_factory, run_factory, user_factory
from webapp.models import Project, Role, Run, RunStatus
from webapp.services import runs as run_services
from webapp.services.projects import project_queue_priority_set

pytestmark = pytest.mark.django_db


def _waits(client, run: Run) -> str:
    client.force_login(run.project.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    return re.search(r"waiting for a worker[^<]*", page).group(0)


def _ahead(line: str) -> int:
    found = re.search(r"(\d+) queued ahead of it", line)
    return int(found.group(1)) if found else 0


def test_workers_take_queued_runs_in_the_order_their_pages_say(client, settings):
    settings.STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT = 2
    busy, first, yielding, resumed = (project_factory(name=n) for n in ("busy", "first", "yielding", "resumed"))
    project_queue_priority_set(user=yielding.owner, project=yielding, priority=-5)
    for worker in ("w1", "w2"):
        run_factory(project=busy, name="holding", status=RunStatus.RUNNING, worker=worker)
    capped = run_factory(project=busy, name="capped", phase="waiting for a worker")
    a1 = run_factory(project=first, name="a1", phase="waiting for a worker")
    low = run_factory(project=yielding, name="low", phase="waiting for a worker")
    a2 = run_factory(project=first, name="a2", phase="waiting for a worker")
    # Launched last, but it trained before it parked and was resumed: it goes first.
    back = run_factory(project=resumed, name="back", phase="waiting for a worker (resume from checkpoint)",
                       started_at=timezone.now())

    said = {run.name: _waits(client, run) for run in (capped, a1, low, a2, back)}
    assert "it resumes ahead of runs not started yet" in said["back"] and _ahead(said["back"]) == 0
    assert "its project has queue priority -5" in said["low"]
    assert "this project has 2 runs in flight, its cap (STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT=2)" in said["capped"]
    page_order = sorted((name for name in said if name != "capped"), key=lambda name: _ahead(said[name]))
    assert [_ahead(said[name]) for name in page_order] == [0, 1, 2, 3]

    taken = []
    while (run_id := run_services.run_claim_next(worker=f"slot{len(taken)}")) is not None:
        taken.append(Run.objects.get(pk=run_id).name)

    assert taken == page_order == ["back", "a1", "a2", "low"]
    assert Run.objects.get(pk=capped.pk).status == RunStatus.QUEUED
    holder = Run.objects.filter(project=busy, name="holding").first()
    Run.objects.filter(pk=holder.pk).update(status=RunStatus.COMPLETED)
    assert run_services.run_claim_next(worker="freed") == capped.pk  # under its cap again


def test_a_project_owner_sets_its_queue_priority_within_the_sites_bounds_and_no_one_else_can(client, settings):
    settings.STUDIO_QUEUE_PRIORITY_MIN, settings.STUDIO_QUEUE_PRIORITY_MAX = -3, 2
    project = project_factory()
    editor = member_factory(project=project, role=Role.EDITOR, user=user_factory())
    client.force_login(project.owner)

    client.post(f"/projects/{project.pk}/queue-priority/", {"queue_priority": "2"})
    assert Project.objects.get(pk=project.pk).queue_priority == 2
    refused = client.post(f"/projects/{project.pk}/queue-priority/", {"queue_priority": "9"}, follow=True)
    assert "choose a priority from -3 to 2" in refused.content.decode()
    assert Project.objects.get(pk=project.pk).queue_priority == 2
    page = client.get(f"/projects/{project.pk}/").content.decode()
    assert 'id="queue-priority">2<' in page and "this site allows -3 to 2" in page
    assert client.get(f"/api/projects/{project.pk}/").json()["queue_priority"] == 2

    client.force_login(editor)
    assert client.post(f"/projects/{project.pk}/queue-priority/", {"queue_priority": "-3"}).status_code == 403
    assert Project.objects.get(pk=project.pk).queue_priority == 2
    assert 'name="queue_priority"' not in client.get(f"/projects/{project.pk}/").content.decode()


def test_a_priority_above_bounds_narrowed_since_counts_as_the_bound(client, settings):
    high, other = project_factory(), project_factory()
    Project.objects.filter(pk=high.pk).update(queue_priority=50)  # chosen when the site allowed it
    settings.STUDIO_QUEUE_PRIORITY_MIN, settings.STUDIO_QUEUE_PRIORITY_MAX = -10, 0
    earlier = run_factory(project=other, name="earlier", phase="waiting for a worker")
    later = run_factory(project=high, name="later", phase="waiting for a worker")

    assert _ahead(_waits(client, later)) == 1
    assert run_services.run_claim_next(worker="w") == earlier.pk
