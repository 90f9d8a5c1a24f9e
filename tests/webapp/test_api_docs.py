"""The API explains itself to a person: /docs/ leads to Swagger UI, served from this server's files under the
site's CSP (no CDN, no inline script), listing the error responses and rate limits; the API token page lets a
user create, see and revoke the token their scripts use."""
from __future__ import annotations


import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.webapp.factories import project_factory, user_factory
from tests.webapp.browser import SHOTS, launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture


@pytest.mark.django_db
def test_docs_leads_to_the_api_docs_page(client):
    client.force_login(user_factory())
    response = client.get("/docs/")
    assert response.status_code == 302 and response["Location"] == reverse("api:api-docs")


def test_the_api_docs_page_loads_no_inline_script_and_nothing_from_another_site(client):
    html = client.get(reverse("api:api-docs")).content.decode()
    assert "<script>" not in html  # the site's CSP would block it: the page stayed blank
    assert "cdn" not in html.lower() and "https://" not in html
    script = client.get(reverse("api:api-docs") + "?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")


@pytest.mark.django_db
def test_a_user_creates_sees_and_revokes_their_api_token_on_the_token_page(client):
    user = project_factory().owner
    client.force_login(user)
    page = client.get(reverse("api-token"))
    assert page.status_code == 200 and b"You have no API token" in page.content
    client.post(reverse("api-token"), {"action": "create"})
    key = Token.objects.get(user=user).key
    assert key in client.get(reverse("api-token")).content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/projects/").json()["count"] == 1
    client.post(reverse("api-token"), {"action": "create"})  # a new token replaces the old one
    assert api.get("/api/projects/").status_code == 401
    client.post(reverse("api-token"), {"action": "revoke"})
    assert not Token.objects.filter(user=user).exists()
    assert b"You have no API token" in client.get(reverse("api-token")).content


@pytest.mark.django_db
def test_the_token_page_refuses_an_unknown_action_and_changes_nothing(client):
    user = user_factory()
    client.force_login(user)
    assert client.post(reverse("api-token"), {"action": "steal"}).status_code == 400
    assert not Token.objects.filter(user=user).exists()
    client.logout()
    assert client.get(reverse("api-token")).status_code == 302  # to the login page


@pytest.mark.django_db(transaction=True)
@pytest.mark.browser
def test_the_api_docs_page_shows_swagger_ui_with_errors_and_rate_limits_in_a_browser(server):  # noqa: F811
    from playwright.sync_api import expect

    user = project_factory().owner
    SHOTS.mkdir(parents=True, exist_ok=True)
    with launch_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        blocked: list[str] = []
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        log_in(page, server, user.username)
        page.click("#nav-api-docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("Rubric Studio API", timeout=30000)
        expect(page.locator(".swagger-ui .info")).to_contain_text("Rate limits")
        expect(page.locator(".swagger-ui .info")).to_contain_text("Retry-After")
        expect(page.locator(".swagger-ui .info")).to_contain_text("404")
        expect(page.locator(".opblock-tag-section").first).to_be_visible()
        page.screenshot(path=str(SHOTS / "api-docs.png"), full_page=False)
        page.click("#api-docs-bar a:has-text('API token')")
        page.click("button[value=create]")
        expect(page.locator("#api-token")).to_be_visible()
        shown = page.locator("#api-token").inner_text()
        page.screenshot(path=str(SHOTS / "api-token.png"), full_page=False)
        browser.close()
    assert blocked == []
    assert shown == Token.objects.get(user=user).key
