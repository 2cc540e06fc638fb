"""The approval page in a real Chromium: what an approver does, where they do it.

Each test opens an approval link the way an email would, answers (or is refused) through the page,
and checks that the token appears in no URL and no header after the link's first request. The
answer's POST must carry a real ``Origin`` (the page once sent ``Referrer-Policy: no-referrer``,
which makes Chromium post ``Origin: null`` and Django refuse the answer with a CSRF 403).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.sessions.models import Session
from django.shortcuts import resolve_url
from django.template import TemplateDoesNotExist
from django.template.loader import get_template
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_wakes
from django_wakes.models import Wake
from tests.browser import Browser, browser_fixture, chromium_fixture  # noqa: F401  (the fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KIND = "release.deploy"  # what the screenshots show as the action
WORKSPACE = "team-alice"  # testproject.wakes.authorize lets a user whose name is in the workspace id answer
PASSWORD = "correct horse battery staple"
ANSWER_PATH = "/wakes/approve/answer/"


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def calls(sinks: Any) -> Any:
    """Register a recording sink for this module's kind; return what it received."""
    return sinks(KIND)


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD)


def request_approval(**overrides: Any) -> django_wakes.ApprovalRequest:
    fields: dict[str, Any] = {
        "workspace_id": WORKSPACE,
        "prompt": "Deploy build 42 to production?\nThe release notes are in the intent.",
        "expires_in": "1h",
        "kind": KIND,
        "intent": {"deploy": "build 42", "to": "production"},
    }
    return django_wakes.request_approval(**{**fields, **overrides})


def link(token: str) -> str:
    return reverse("django_wakes:approve", args=[token])


def log_in(browser: Browser, user: Any) -> None:
    """Give the browser a logged-in session (the login form itself is tested on its own)."""
    client = Client()
    client.force_login(user)
    browser.visit(
        resolve_url(django_settings.LOGIN_URL)
    )  # a page of the live server, so the cookie can be set for its host
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME]
    browser.driver.add_cookie({"name": cookie.key, "value": cookie.value})


def open_link(browser: Browser, token: str) -> None:
    """Open the approval link as from an email: it lands on the token-free answer page (or login)."""
    browser.visit(link(token))
    assert token not in browser.url


def choose(browser: Browser, decision: str, comment: str = "") -> None:
    browser.click(f'input[name="decision"][value="{decision}"]')
    if comment:
        browser.fill("comment", comment)


def choose_and_send(browser: Browser, decision: str, comment: str = "") -> None:
    choose(browser, decision, comment)
    browser.submit()


def assert_token_left_the_urls(browser: Browser, token: str) -> None:
    """Only the link's own request has the token; no later URL, Referer or other header does."""
    requests = browser.requests()
    with_token = [r.url for r in requests if token in r.url]
    assert with_token == [browser.base_url + link(token)], with_token
    assert requests[0].url == with_token[0]
    assert not [v for v in browser.header_values() if token in v]
    assert token not in browser.url


def assert_posts_carried_a_real_origin(browser: Browser) -> None:
    posts = [r for r in browser.requests() if r.method == "POST"]
    assert posts
    for post in posts:
        assert post.headers.get("Origin") == browser.base_url, post
        assert post.headers.get("Referer", "").startswith(browser.base_url + "/"), post


def test_approve_end_to_end(browser: Browser, alice: Any, calls: Any) -> None:
    approval = request_approval()
    log_in(browser, alice)
    browser.clear_requests()  # the request log starts at the link
    open_link(browser, approval.token)
    assert browser.path == ANSWER_PATH
    page = browser.text()
    assert "Approval requested" in page and "Deploy build 42 to production?" in page
    assert "answering as alice" in page
    browser.click("details summary")  # show the intent
    assert '"to": "production"' in browser.text("pre")
    choose(browser, "approve", "Ship it.")
    browser.screenshot("approve-form")
    browser.submit()
    assert browser.path == ANSWER_PATH
    assert "You approved this request." in browser.text()
    browser.screenshot("approve-done-approved")
    assert_posts_carried_a_real_origin(browser)
    assert_token_left_the_urls(browser, approval.token)

    assert calls == []
    report = django_wakes.run_due()
    assert report.fired == 1
    assert calls.ids == [approval.wake.pk]
    assert calls.results == [
        {"trigger": "on_approval", "answer": {"approved": True, "comment": "Ship it."}, "resolved_by": "alice"}
    ]


def test_reject_end_to_end(browser: Browser, alice: Any, calls: Any) -> None:
    approval = request_approval(prompt="Drop the staging database?")
    log_in(browser, alice)
    browser.clear_requests()
    open_link(browser, approval.token)
    choose_and_send(browser, "reject", "Not on a Friday.")
    assert "You rejected this request." in browser.text()
    assert "Not on a Friday." in browser.text("pre")
    browser.screenshot("approve-done-rejected")
    assert_posts_carried_a_real_origin(browser)
    assert_token_left_the_urls(browser, approval.token)
    django_wakes.run_due()
    assert calls.results == [
        {"trigger": "on_approval", "answer": {"approved": False, "comment": "Not on a Friday."}, "resolved_by": "alice"}
    ]


def test_logged_out_approver_logs_in_comes_back_and_answers(browser: Browser, alice: Any, calls: Any) -> None:
    """A newcomer's first approval: the project has no login template of its own, only the page the app ships."""
    with pytest.raises(TemplateDoesNotExist):
        get_template("registration/login.html")  # the testproject brings none, as a pip-installed project
    assert django_settings.LOGIN_URL == "django_wakes:login"
    approval = request_approval()
    open_link(browser, approval.token)
    assert browser.path == f"/wakes/login/?next={ANSWER_PATH}"
    assert "Log in to answer the approval." in browser.text()
    browser.screenshot("login")
    browser.fill("username", "alice")
    browser.fill("password", PASSWORD)
    browser.submit()
    assert browser.path == ANSWER_PATH
    assert "Deploy build 42 to production?" in browser.text()
    choose_and_send(browser, "approve")
    assert "You approved this request." in browser.text()
    assert_posts_carried_a_real_origin(browser)  # the login form's and the answer's
    assert_token_left_the_urls(browser, approval.token)
    django_wakes.run_due()
    assert calls.results == [
        {"trigger": "on_approval", "answer": {"approved": True, "comment": ""}, "resolved_by": "alice"}
    ]


def test_the_prompt_and_the_intent_are_shown_as_text(browser: Browser, alice: Any, calls: Any) -> None:
    approval = request_approval(
        prompt="<script>window.pwned = 1; document.title = 'pwned'</script><b>Bold?</b>",
        intent={"note": '<img src=x onerror="window.pwned = 2">'},
    )
    log_in(browser, alice)
    open_link(browser, approval.token)
    assert browser.find(".prompt").text == "<script>window.pwned = 1; document.title = 'pwned'</script><b>Bold?</b>"
    browser.click("details summary")
    assert '<img src=x onerror=\\"window.pwned = 2\\">' in browser.text("pre")
    assert browser.driver.execute_script("return window.pwned === undefined")
    assert browser.driver.title == "Approval requested"
    assert browser.driver.find_elements("css selector", "main script, main b, main img") == []


def refused(browser: Browser, name: str, path: str = ANSWER_PATH) -> str:
    """The refusal page the browser ended on: the answer page's, or the link's own (``approve/refused/...``)."""
    assert browser.path == path
    browser.screenshot(name)
    assert browser.driver.find_elements("css selector", "form") == []
    return browser.text()


def status_of_last_page(browser: Browser) -> int:
    return browser.driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus")


def test_an_unknown_link_gets_404(browser: Browser, alice: Any) -> None:
    approval = request_approval()
    log_in(browser, alice)
    browser.clear_requests()
    open_link(browser, approval.token[::-1])
    page = refused(browser, "refused-404", "/wakes/approve/refused/not-found/")
    assert status_of_last_page(browser) == 404
    assert "Approval not found" in page and "This approval link is not valid." in page
    assert_token_left_the_urls(browser, approval.token[::-1])


def test_a_stranger_opening_made_up_links_gets_404_and_no_cookie(browser: Browser) -> None:
    """Logged out, no cookie yet: a link to no waiting approval is refused at once and leaves no session behind."""
    before = Session.objects.count()
    for _ in range(3):
        token = secrets.token_urlsafe(32)
        open_link(browser, token)
        assert browser.path == "/wakes/approve/refused/not-found/"
        assert status_of_last_page(browser) == 404
        assert "This approval link is not valid." in browser.text()
    assert browser.driver.get_cookies() == []
    assert Session.objects.count() == before


def test_nothing_in_the_session_gets_404(browser: Browser, alice: Any) -> None:
    log_in(browser, alice)
    browser.visit(ANSWER_PATH)
    assert status_of_last_page(browser) == 404
    assert "This approval link is not valid." in browser.text()


def test_an_approver_not_allowed_gets_403(browser: Browser, django_user_model: Any) -> None:
    approval = request_approval()
    log_in(browser, django_user_model.objects.create_user("bob"))
    browser.clear_requests()
    open_link(browser, approval.token)
    page = refused(browser, "refused-403")
    assert status_of_last_page(browser) == 403
    assert "You are not allowed to answer this approval." in page
    assert "Deploy" not in page  # the prompt is not shown to the unauthorized
    assert_token_left_the_urls(browser, approval.token)


def test_an_answered_approval_gets_409(browser: Browser, alice: Any) -> None:
    approval = request_approval()
    django_wakes.resolve(approval.token, {"approved": True, "comment": ""}, "demo")
    log_in(browser, alice)
    browser.clear_requests()
    open_link(browser, approval.token)
    page = refused(browser, "refused-409", "/wakes/approve/refused/answered/")
    assert status_of_last_page(browser) == 409
    assert "This approval was already answered or cancelled." in page
    assert_token_left_the_urls(browser, approval.token)


def test_an_answer_to_a_page_answered_meanwhile_gets_409(browser: Browser, alice: Any, calls: Any) -> None:
    approval = request_approval()
    log_in(browser, alice)
    open_link(browser, approval.token)
    django_wakes.resolve(approval.token, {"approved": False, "comment": "from elsewhere"}, "demo")
    choose_and_send(browser, "approve")
    assert status_of_last_page(browser) == 409
    assert "Already answered" in browser.text()
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "demo"


def test_an_expired_approval_gets_410(browser: Browser, alice: Any) -> None:
    approval = request_approval()
    Wake.objects.filter(pk=approval.wake.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    log_in(browser, alice)
    browser.clear_requests()
    open_link(browser, approval.token)
    page = refused(browser, "refused-410", "/wakes/approve/refused/expired/")
    assert status_of_last_page(browser) == 410
    assert "This approval expired before it was answered." in page
    assert_token_left_the_urls(browser, approval.token)


def test_the_demo_prints_a_link_that_works(browser: Browser) -> None:
    """``make demo``'s last lines: a link, a staff user to answer it with, the console and the dashboard."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("wakes_demo", delay=0.1, base_url=browser.base_url, stdout=out)
    lines = out.getvalue().splitlines()
    demo_link = next(line.split()[-1] for line in lines if "open the link:" in line)
    credentials = next(line for line in lines if "log in as:" in line)
    username, password = credentials.split("username ")[1].split(", password ")
    assert demo_link.startswith(browser.base_url + "/wakes/approve/")
    browser.visit(demo_link)
    browser.fill("username", username)
    browser.fill("password", password)
    browser.submit()
    assert "Deploy build 42 to production?" in browser.text()
    choose_and_send(browser, "approve")
    assert "You approved this request." in browser.text()
    console = next(line.split()[-1] for line in lines if "the wakes:" in line)
    dashboard = next(line.split()[-1] for line in lines if "the dashboard:" in line)
    assert lines[-1].split("username ")[1] == f"{username}, password {password}"  # the last line: the login
    browser.visit(console)  # the same session: the demo user is staff, and may view wakes
    assert browser.path == "/admin/django_wakes/wake/"
    assert "demo.print" in browser.text("#result_list")
    browser.visit(dashboard)
    assert browser.path == "/admin/django_wakes/wake/dashboard/"
    assert browser.find("#backlog-heading").get_attribute("textContent") == "Backlog"
