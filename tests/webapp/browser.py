"""The one place the tests start a browser: Debian's chromium (never a download) driven by Playwright, headless.

- `launch_chromium()`: a context manager that yields a launched chromium. The test may use the ORM inside it, and
  every database connection opened inside is closed before the block ends (issue 44).
- `log_in(page, server, username)`: signs a test user in through the login form.
- `CHROMIUM`, `ARGS`: the browser and its flags; `SHOTS`: where screenshots go (var/screenshots/).

Why the block closes connections itself: inside `sync_playwright()` Playwright's event loop runs in this thread
(in its dispatcher greenlet), so Django treats the test's code as async code. Its connections are kept per thread
(asgiref's thread-critical Local), and in a thread with a running loop they sit in a context variable of that
thread apart from the plain thread-local ones: the ORM inside the block opens a second connection, which the
test's own connection, pytest-django's teardown and `close_all()` after the block never see. Left open, it held
the test database until the process ended, and the suite's drop of that database failed ("being accessed by other
users"). Only `close_all()` run while the loop still runs reaches it. The ORM refuses to run at all in a running
loop unless DJANGO_ALLOW_ASYNC_UNSAFE is set, so the block sets it (and puts back what was there).

Django is imported only inside the functions: tests/conftest.py reads `CHROMIUM` before Django is set up.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "var" / "screenshots"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic", "--no-first-run",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    """Chromium for the block; the connections the block opened are closed where they live, even on a failure."""
    from django.db import connections
    from playwright.sync_api import sync_playwright

    allowed = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the test reads the database between clicks
    try:
        with sync_playwright() as pw:
            try:
                yield pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            finally:
                connections.close_all()  # inside the block: the loop still runs, so these are the block's own
    finally:
        if allowed is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = allowed


def log_in(page: Page, server: str, username: str) -> None:
    """Signs `username` in through the login form (every test user has the factories' PASSWORD)."""
    from tests.webapp.factories import PASSWORD

    page.goto(server + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
