"""A browser test that reads the database inside its Playwright block leaves no session open on the test database
(issue 44): tests/webapp/browser.py's `launch_chromium()` closes the connection the block opened; a bare
`sync_playwright()` block leaves it open, which made the suite's drop of the test database fail at the end."""
from __future__ import annotations

import pytest
from django.db import connection, connections

from tests.ports import wait_for
from tests.webapp.browser import launch_chromium
from tests.webapp.factories import project_factory
from webapp.models import Project

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _open_on_test_database(pid: int) -> bool:
    """Whether backend `pid` is still a session on this test database, as the main connection sees it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND datname = current_database()", [pid])
        return cursor.fetchone()[0] == 1


@pytest.fixture(autouse=True)
def _postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("sessions are counted in PostgreSQL's pg_stat_activity")


def test_a_database_read_inside_the_browser_block_leaves_no_session_on_the_test_database():
    project = project_factory(name="Read between clicks")
    main = _backend_pid()
    with launch_chromium() as browser:
        assert browser.is_connected()
        assert Project.objects.get(pk=project.pk).name == "Read between clicks"
        inside = _backend_pid()
        assert inside != main  # the block's own connection, which nothing after the block can reach
    assert _backend_pid() == main
    # A closed session leaves pg_stat_activity a moment after the client goes (the backend exits on its own).
    wait_for(lambda: not _open_on_test_database(inside), timeout=10,
             message=f"backend {inside}, opened inside the block, to leave the test database")


def test_without_the_helper_the_blocks_connection_outlives_it(monkeypatch):
    """The cause the helper exists for: the same read inside a bare sync_playwright() block keeps its session."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    project_factory()
    with sync_playwright():
        assert Project.objects.exists()
        inside = _backend_pid()
    try:
        connections.close_all()  # after the block: it closes the main connection only
        assert _open_on_test_database(inside)
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: not _open_on_test_database(inside), timeout=2)
    finally:
        with sync_playwright():  # the same thread's loop context again: there the leaked connection is reachable
            connections.close_all()
    wait_for(lambda: not _open_on_test_database(inside), timeout=10, message=f"leaked backend {inside} to close")
