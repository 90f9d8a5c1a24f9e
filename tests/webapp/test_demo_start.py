"""`manage.py studio_demo` can always be entered (issue 48, item 7): settings are checked before anything is
created, and a start that finds the demo user says how to get in, or prints a new password on request.

In-process on the test database: the launch's enqueue waits for a commit that the test's transaction never makes,
so no run trains here (tests/webapp/test_embedded.py trains the demo end to end)."""
from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from webapp.models import Project, Run

pytestmark = pytest.mark.django_db


def _start(tiny_model_dir, *args: str) -> str:
    out = io.StringIO()
    call_command("studio_demo", "--steps", "1", "--model-dir", str(tiny_model_dir), *args, stdout=out)
    return out.getvalue()


def _printed_password(output: str) -> str:
    match = re.search(r"^  password: (\S+)$", output, re.MULTILINE)
    assert match, output
    return match.group(1)


def test_a_judge_key_variable_that_is_not_set_stops_the_demo_before_any_user_or_project_exists(
        tiny_model_dir, monkeypatch):
    monkeypatch.setenv("JUDGE_MODEL", "openai/judge")
    monkeypatch.setenv("JUDGE_API_KEY_ENV", "DEMO_JUDGE_API_KEY")
    monkeypatch.delenv("DEMO_JUDGE_API_KEY", raising=False)
    with pytest.raises(CommandError, match="'DEMO_JUDGE_API_KEY', but that variable is not set"):
        _start(tiny_model_dir)
    assert not get_user_model().objects.filter(username="demo").exists()
    assert not Project.objects.exists() and not Run.objects.exists()


def test_the_start_after_a_failed_one_creates_the_demo_user_and_prints_a_password_that_signs_in(
        tiny_model_dir, monkeypatch):
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    monkeypatch.setenv("JUDGE_MODEL", "openai/judge")
    monkeypatch.setenv("JUDGE_API_KEY_ENV", "DEMO_JUDGE_API_KEY")
    monkeypatch.delenv("DEMO_JUDGE_API_KEY", raising=False)
    with pytest.raises(CommandError):
        _start(tiny_model_dir)
    monkeypatch.delenv("JUDGE_MODEL")
    password = _printed_password(_start(tiny_model_dir))
    assert authenticate(username="demo", password=password) is not None
    assert Run.objects.filter(project__owner__username="demo").count() == 1


def test_a_start_that_finds_the_demo_user_says_how_to_get_in_and_new_password_prints_one_that_signs_in(
        tiny_model_dir, monkeypatch):
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    monkeypatch.delenv("JUDGE_MODEL", raising=False)
    get_user_model().objects.create_user(username="demo", password="nobody-remembers-this")
    output = _start(tiny_model_dir)
    assert "not shown again" in output and "--new-password" in output and "DEMO_PASSWORD" in output
    password = _printed_password(_start(tiny_model_dir, "--new-password"))
    assert password != "nobody-remembers-this"
    assert authenticate(username="demo", password=password) is not None
    assert authenticate(username="demo", password="nobody-remembers-this") is None


def test_demo_password_set_on_a_later_start_becomes_the_demo_users_password(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("JUDGE_MODEL", raising=False)
    get_user_model().objects.create_user(username="demo", password="nobody-remembers-this")
    monkeypatch.setenv("DEMO_PASSWORD", "chosen-by-the-person")
    assert _printed_password(_start(tiny_model_dir)) == "chosen-by-the-person"
    assert authenticate(username="demo", password="chosen-by-the-person") is not None
