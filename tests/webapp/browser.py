"""The one place the tests start a browser: Debian's chromium (never a download) driven by Playwright, headless.

- `launch_chromium()`: a context manager that yields a launched chromium. The test may use the ORM inside it, and
  every database connection opened inside is closed before the block ends (issue 44).
- `log_in(page, server, username)`: signs a test user in through the login form.
- `live_settled(page, read)`: what a live run page shows once the fragments its last events asked for have landed,
  to compare with a reload.
- `outside_the_loop(fn, ...)`: calls a service that publishes to the live pages (an engine event's ingest, an
  override) from inside the block, where the publish itself cannot run (below). A live publish that fails in the
  block fails the test when the block ends: a page that was meant to get it live would only show it on reload.
- `CHROMIUM`, `ARGS`: the browser and its flags; `SHOTS`: where screenshots go (var/screenshots/).

Why the block closes connections itself: inside `sync_playwright()` Playwright's event loop runs in this thread
(in its dispatcher greenlet), so Django treats the test's code as async code. Its connections are kept per thread
(asgiref's thread-critical Local), and in a thread with a running loop they sit in a context variable of that
thread apart from the plain thread-local ones: the ORM inside the block opens a second connection, which the
test's own connection, pytest-django's teardown and `close_all()` after the block never see. Left open, it held
the test database until the process ended, and the suite's drop of that database failed ("being accessed by other
users"). Only `close_all()` run while the loop still runs reaches it. The ORM refuses to run at all in a running
loop unless DJANGO_ALLOW_ASYNC_UNSAFE is set, so the block sets it (and puts back what was there).

The same running loop is why a live publish (asgiref's async_to_sync) refuses to run in this thread: the test's
service call stores its rows and logs "could not publish", so the test's page only sees them on reload.
`outside_the_loop` runs the call in a thread of its own (and closes that thread's connections).

Django is imported only inside the functions: tests/conftest.py reads `CHROMIUM` before Django is set up.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "var" / "screenshots"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic", "--no-first-run",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    """Chromium for the block; the connections the block opened are closed where they live, even on a failure.
    A live publish that failed in this process during the block fails the test at its end."""
    from django.db import connections
    from playwright.sync_api import sync_playwright

    allowed = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the test reads the database between clicks
    failed = _Failures()
    live = logging.getLogger("webapp.live")
    live.addHandler(failed)
    try:
        with sync_playwright() as pw:
            try:
                yield pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            finally:
                connections.close_all()  # inside the block: the loop still runs, so these are the block's own
    finally:
        live.removeHandler(failed)
        if allowed is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = allowed
    if failed.records:
        raise AssertionError("a live publish failed inside the browser block (call the service through "
                             f"outside_the_loop): {failed.records[0].getMessage()}")


class _Failures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def outside_the_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` in a thread without an event loop, so its live publishes reach the pages; the
    thread's database connections are closed before it ends."""
    from django.db import connections

    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - raised again in the test's thread below
            box["error"] = err
        finally:
            connections.close_all()

    thread = threading.Thread(target=call, name="outside-the-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def log_in(page: Page, server: str, username: str) -> None:
    """Signs `username` in through the login form (every test user has the factories' PASSWORD)."""
    from tests.webapp.factories import PASSWORD

    page.goto(server + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")


# A group announced live gets an empty slot (this id, no class) until its card's fragment arrives.
GROUP_SLOTS = "() => document.querySelectorAll('#groups div[id^=group-]').length"


def live_settled(page: "Page", read: Callable[[], T], *, quiet_s: float = 0.5, timeout: float = 60) -> T:
    """`read()` of a live run page once its updates have landed: no group slot waiting for its card, and the same
    answer twice `quiet_s` apart. The header's new state can arrive before the cards of the events that came
    before it (each is a fetch of its own), so a read at the moment the header changes can miss a card that a
    reload shows (make test-repeat: a live page read at "Paused" lacked the held step's groups). A page that
    never shows what a reload shows still differs after this."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if page.evaluate(GROUP_SLOTS) == 0:
            now = read()
            if now == last:
                return now
            last = now
        time.sleep(quiet_s)
    raise AssertionError(f"the live page kept changing (or kept a group slot without its card) for {timeout} s")
