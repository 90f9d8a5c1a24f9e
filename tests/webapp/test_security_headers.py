"""Security headers on every response; a Content Security Policy that lets no inline or injected script run."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.factories import run_factory

pytestmark = pytest.mark.django_db


def _directives(header: str) -> dict[str, list[str]]:
    return {d.split()[0]: d.split()[1:] for d in (p.strip() for p in header.split(";")) if d}


def test_pages_carry_a_csp_without_inline_scripts_and_the_usual_security_headers(client):
    run = run_factory()
    client.force_login(run.project.owner)
    for url in (reverse("login"), reverse("run-detail", args=[run.id]), "/api/runs/"):
        response = client.get(url)
        csp = _directives(response["Content-Security-Policy"])
        assert csp["script-src"] == ["'self'"], url  # no 'unsafe-inline', no 'unsafe-eval'
        assert csp["object-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
        assert response["X-Content-Type-Options"] == "nosniff" and response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"


def test_no_template_holds_an_inline_script_or_event_handler():
    """What the CSP would block in a real browser: every script is a static file (json_script data aside)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "templates"
    offenders = []
    for path in root.rglob("*.html"):
        text = path.read_text()
        for match in re.finditer(r"<script\b([^>]*)>", text):
            if "src=" not in match.group(1):
                offenders.append(f"{path.name}: inline <script{match.group(1)}>")
        offenders += [f"{path.name}: {m.group(0)}" for m in re.finditer(r"\son[a-z]+\s*=", text)]
    assert offenders == []
