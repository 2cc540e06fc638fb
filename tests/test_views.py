"""The approval page through Django's test client: the link's token becomes a signed hash in a cookie and
leaves the URL at once; opening a link writes no session, however often; who may answer; what each refusal
looks like; that the token leaks nowhere.

What only a real browser shows (Referer and Origin headers, the login round trip) is in
test_browser_approval.py.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.sessions.models import Session
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_wakes
from django_wakes import engine
from django_wakes.models import State, Wake
from django_wakes.testing import fake_clock
from django_wakes.web.approval_pages import LINK_COOKIE, LINK_COOKIE_SALT

pytestmark = pytest.mark.django_db

KIND = "test.views"
START = datetime(2030, 1, 1, tzinfo=UTC)
WORKSPACE = "team-alice"  # testproject.wakes.authorize lets a user whose name is in the workspace id answer
PASSWORD = "correct horse battery staple"
ANSWER_URL = "/wakes/approve/answer/"
DB_SESSIONS = "django.contrib.sessions.backends.db"


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def kind(sinks) -> str:
    """Register a sink for this module's kind (conftest restores the registry afterwards)."""
    sinks(KIND)
    return KIND


def request_approval(**overrides: Any) -> django_wakes.ApprovalRequest:
    fields: dict[str, Any] = {
        "workspace_id": WORKSPACE,
        "prompt": "Deploy <b>prod</b> now?",
        "expires_in": "1h",
        "kind": KIND,
        "intent": {"deploy": "prod", "note": "<script>x</script>"},
    }
    return django_wakes.request_approval(**{**fields, **overrides})


@pytest.fixture
def approval() -> django_wakes.ApprovalRequest:
    return request_approval()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD)


@pytest.fixture
def client(alice: Any) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def kept(client: Client) -> str | None:
    """The token hash the browser keeps for the answer page (its signed cookie), or ``None``."""
    from django.core import signing

    morsel = client.cookies.get(LINK_COOKIE)
    if morsel is None or not morsel.value:
        return None
    return signing.TimestampSigner(salt=LINK_COOKIE_SALT).unsign(morsel.value)


def link(token: str) -> str:
    return reverse("django_wakes:approve", args=[token])


def open_link(client: Client, token: str) -> Any:
    """Follow an approval link as the approver's browser does; it always redirects to the answer page."""
    response = client.get(link(token))
    assert response.status_code == 302
    assert response["Location"] == ANSWER_URL
    return response


def refused_link(client: Client, token: str, reason: str) -> Any:
    """Follow a link that opens no waiting approval: redirected to a token-free refusal, and no cookie set."""
    response = client.get(link(token))
    assert response.status_code == 302
    assert response["Location"] == f"/wakes/approve/refused/{reason}/"
    assert response["Referrer-Policy"] == "no-referrer"
    assert response.content == b""
    page = client.get(response["Location"])
    for each in (response, page):
        assert not each.cookies, each.cookies
        assert "no-store" in each["Cache-Control"]
    assert page["Referrer-Policy"] == "same-origin"
    assert token not in page.content.decode()
    return page


def answer(client: Client, wake: Wake | int, decision: str = "approve", comment: str = "", **extra: Any) -> Any:
    wake_id = wake if isinstance(wake, int) else wake.pk
    return client.post(ANSWER_URL, {"wake": wake_id, "decision": decision, "comment": comment, **extra})


def open_and_answer(client: Client, approval: django_wakes.ApprovalRequest, **kwargs: Any) -> Any:
    open_link(client, approval.token)
    return answer(client, approval.wake, **kwargs)


def assert_guarded(response: Any, token: str) -> None:
    """Every answer-page response: same-origin referrers, never cached, and the token nowhere in the page."""
    assert response["Referrer-Policy"] == "same-origin"
    assert "no-store" in response["Cache-Control"]
    assert token not in response.content.decode()


def test_urls_are_namespaced(approval: django_wakes.ApprovalRequest) -> None:
    assert link(approval.token) == f"/wakes/approve/{approval.token}/"
    assert reverse("django_wakes:answer") == ANSWER_URL


def test_the_link_keeps_only_the_signed_hash_in_a_cookie_and_redirects_to_a_token_free_url(
    client: Client, approval: django_wakes.ApprovalRequest
) -> None:
    response = open_link(client, approval.token)
    assert approval.token not in response["Location"]
    assert response["Referrer-Policy"] == "no-referrer"
    assert "no-store" in response["Cache-Control"]
    assert response.content == b""  # nothing rendered at the token's URL, so nothing to leak it from
    token_hash = engine.hash_token(approval.token)
    cookie = response.cookies[LINK_COOKIE]
    assert kept(client) == token_hash and approval.token not in cookie.value
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == ANSWER_URL
    assert 0 < int(cookie["max-age"]) <= 3601  # no longer than the approval waits (an hour here)
    for row in Session.objects.all():
        assert approval.token not in row.session_data and token_hash not in row.session_data


def test_the_link_never_refuses_by_itself(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    """A 4xx at the token URL would be logged with its path by Django: a token-free page refuses instead."""
    unknown = approval.token[::-1]
    assert refused_link(client, unknown, "not-found").status_code == 404
    assert kept(client) is None
    assert open_link(Client(), approval.token)["Referrer-Policy"] == "no-referrer"  # anonymous too


def test_a_link_that_opens_no_waiting_approval_writes_no_session(settings: Any, alice: Any) -> None:
    """Made-up links cannot grow the session table: only a link to an approval waiting for its answer keeps one."""
    settings.SESSION_ENGINE = DB_SESSIONS
    answered = request_approval(prompt="Answered?")
    django_wakes.resolve(answered.token, {"approved": True, "comment": ""}, "demo")
    cancelled = request_approval(prompt="Cancelled?")
    django_wakes.cancel(cancelled.wake.pk)
    expired = request_approval(prompt="Expired?")
    Wake.objects.filter(pk=expired.wake.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    expiry_fired = request_approval(prompt="Expiry fired?")
    Wake.objects.filter(pk=expiry_fired.wake.pk).update(state=State.EXPIRED, expires_at=START)
    before = Session.objects.count()
    links = [Client().get(link(secrets.token_urlsafe(32))) for _ in range(50)]  # a script keeping no cookies
    assert Session.objects.count() == before  # not 50 rows more
    assert not [response.cookies for response in links if response.cookies]
    stranger = Client()
    page = refused_link(stranger, secrets.token_urlsafe(32), "not-found")
    assert page.status_code == 404 and "not valid" in page.content.decode()
    assert stranger.head(link("not-a-token")).status_code == 302
    for token, reason, status, says in (
        (answered.token, "answered", 409, "already answered"),
        (cancelled.token, "answered", 409, "already answered"),
        (expired.token, "expired", 410, "expired"),
        (expiry_fired.token, "expired", 410, "expired"),
    ):
        page = refused_link(stranger, token, reason)
        assert page.status_code == status and says in page.content.decode()
    assert Session.objects.count() == before
    assert not stranger.cookies
    # A logged-in approver's browser is left as it was: the link they opened before is still the one kept.
    waiting = request_approval()
    approver = Client()
    approver.force_login(alice)
    open_link(approver, waiting.token)
    kept_rows = Session.objects.count()
    refused_link(approver, answered.token, "answered")
    refused_link(approver, secrets.token_urlsafe(32), "not-found")
    assert kept(approver) == engine.hash_token(waiting.token)
    assert approver.get(ANSWER_URL).status_code == 200
    assert Session.objects.count() == kept_rows
    # The link of a waiting approval keeps its hash in the stranger's cookie, not in a session.
    assert not open_link(stranger, waiting.token).cookies.get(django_settings.SESSION_COOKIE_NAME)
    assert Session.objects.count() == kept_rows
    assert kept(stranger) == engine.hash_token(waiting.token)


def test_a_pending_link_opened_a_hundred_times_without_cookies_adds_no_session_row(settings: Any, alice: Any) -> None:
    """Issue 26, finding 4: each cookie-less GET of one valid link added a django_session row (kept two weeks)."""
    settings.SESSION_ENGINE = DB_SESSIONS
    waiting = request_approval()
    before = Session.objects.count()
    for _ in range(100):
        response = Client().get(link(waiting.token))  # a script keeping no cookies
        assert response.status_code == 302 and response["Location"] == ANSWER_URL
        assert django_settings.SESSION_COOKIE_NAME not in response.cookies
    assert Session.objects.count() == before
    browser = Client()  # a person still opens it, logs in (the one session of that login) and answers
    open_link(browser, waiting.token)
    assert (
        browser.post(
            resolve_url(django_settings.LOGIN_URL), {"username": "alice", "password": PASSWORD, "next": ANSWER_URL}
        ).status_code
        == 302
    )
    assert Session.objects.count() == before + 1
    assert answer(browser, waiting.wake).status_code == 200


def test_the_refusal_page_says_only_what_its_url_says(client: Client) -> None:
    for reason, status in (("not-found", 404), ("answered", 409), ("expired", 410), ("no-such-reason", 404)):
        page = Client().get(reverse("django_wakes:refused", args=[reason]))
        assert page.status_code == status and not page.cookies
    assert Client().post(reverse("django_wakes:refused", args=["expired"])).status_code == 405


def test_the_answer_page_shows_the_prompt_and_the_form(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    open_link(client, approval.token)
    response = client.get(ANSWER_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Deploy &lt;b&gt;prod&lt;/b&gt; now?" in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert 'name="decision"' in html and 'name="comment"' in html
    assert f'type="hidden" name="wake" value="{approval.wake.pk}"' in html
    assert 'action=""' in html
    assert "answering as alice" in html
    assert_guarded(response, approval.token)


def test_a_post_answers_the_approval_and_the_browser_forgets_it(
    client: Client, approval: django_wakes.ApprovalRequest
) -> None:
    response = open_and_answer(client, approval, comment="looks good")
    assert response.status_code == 200
    assert "You approved this request." in response.content.decode()
    assert_guarded(response, approval.token)
    wake = Wake.objects.get(pk=approval.wake.pk)
    assert wake.result["answer"] == {"approved": True, "comment": "looks good"}
    assert wake.result["resolved_by"] == "alice"
    assert wake.fire_at is not None and wake.state == State.PENDING  # due now: a runner fires it
    assert kept(client) is None
    assert client.get(ANSWER_URL).status_code == 404  # no link kept any more


def test_a_post_can_reject(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    response = open_and_answer(client, approval, decision="reject")
    assert response.status_code == 200
    assert "You rejected this request." in response.content.decode()
    assert Wake.objects.get(pk=approval.wake.pk).result["answer"] == {"approved": False, "comment": ""}


def test_an_invalid_answer_redisplays_the_form(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    response = open_and_answer(client, approval, decision="maybe")
    assert response.status_code == 400
    assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None
    assert kept(client)  # still there: the approver can try again
    assert answer(client, approval.wake).status_code == 200


def test_an_answer_too_large_for_the_intent_limit_is_refused(
    client: Client, approval: django_wakes.ApprovalRequest, settings: Any
) -> None:
    settings.WAKES = {**settings.WAKES, "INTENT_MAX_BYTES": 100}
    response = open_and_answer(client, approval, comment="x" * 500)
    assert response.status_code == 400
    assert "too long" in response.content.decode()
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_an_answer_posted_from_a_page_of_another_approval_is_refused(
    client: Client, approval: django_wakes.ApprovalRequest
) -> None:
    """Two links opened in one browser: the older page cannot answer the newer approval by mistake."""
    second = request_approval(prompt="Drop the staging database?")
    open_link(client, approval.token)
    assert client.get(ANSWER_URL).status_code == 200  # the page shows the first prompt...
    open_link(client, second.token)  # ...then the second link is opened in another tab
    response = answer(client, approval.wake)
    assert response.status_code == 409
    assert "out of date" in response.content.decode()
    assert Wake.objects.filter(pk__in=[approval.wake.pk, second.wake.pk], fire_at__isnull=False).count() == 0
    assert answer(client, second.wake, decision="reject").status_code == 200
    assert Wake.objects.get(pk=second.wake.pk).result["answer"]["approved"] is False
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_anonymous_users_log_in_and_come_back_without_the_token_in_any_url(
    alice: Any, approval: django_wakes.ApprovalRequest
) -> None:
    browser = Client()
    open_link(browser, approval.token)
    assert kept(browser) == engine.hash_token(approval.token)
    to_login = browser.get(ANSWER_URL)
    assert to_login.status_code == 302
    assert to_login["Location"] == f"{resolve_url(django_settings.LOGIN_URL)}?next=/wakes/approve/answer/"
    assert browser.post(ANSWER_URL, {"wake": approval.wake.pk, "decision": "approve"}).status_code == 302
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None  # not answered while logged out
    login_page = browser.get(to_login["Location"])
    assert login_page.status_code == 200
    assert approval.token not in login_page.content.decode()
    back = browser.post(
        resolve_url(django_settings.LOGIN_URL),
        {"username": "alice", "password": PASSWORD, "next": "/wakes/approve/answer/"},
    )
    assert back.status_code == 302 and back["Location"] == ANSWER_URL
    assert kept(browser) == engine.hash_token(approval.token)  # kept across the login
    assert browser.get(ANSWER_URL).status_code == 200
    assert answer(browser, approval.wake).status_code == 200
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "alice"


def test_a_second_answer_gets_409(alice: Any, client: Client, approval: django_wakes.ApprovalRequest) -> None:
    second = Client()
    second.force_login(alice)
    open_link(second, approval.token)  # the page is open in another browser...
    assert open_and_answer(client, approval).status_code == 200  # ...when the approval is answered
    for response in (second.get(ANSWER_URL), answer(second, approval.wake, decision="reject")):
        assert response.status_code == 409
        assert "already answered" in response.content.decode()
        assert_guarded(response, approval.token)
    page = refused_link(client, approval.token, "answered")  # the link, opened again, is refused at once
    assert page.status_code == 409 and "already answered" in page.content.decode()
    assert Wake.objects.get(pk=approval.wake.pk).result["answer"]["approved"] is True


def test_of_two_approvers_with_the_page_open_the_first_answer_wins(
    client: Client, django_user_model: Any, approval: django_wakes.ApprovalRequest
) -> None:
    demo = Client()
    demo.force_login(django_user_model.objects.create_user("demo"))
    for browser in (client, demo):
        open_link(browser, approval.token)
        assert browser.get(ANSWER_URL).status_code == 200
    assert answer(demo, approval.wake, decision="reject").status_code == 200
    assert answer(client, approval.wake).status_code == 409
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "demo"


def test_a_cancelled_approval_gets_409(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    open_link(client, approval.token)
    django_wakes.cancel(approval.wake.pk)
    assert client.get(ANSWER_URL).status_code == 409
    assert answer(client, approval.wake).status_code == 409
    assert refused_link(client, approval.token, "answered").status_code == 409


def test_an_expired_approval_gets_410(client: Client) -> None:
    with fake_clock(START) as fake:
        approval = request_approval(expires_in="1h")
        open_link(client, approval.token)
        assert client.get(ANSWER_URL).status_code == 200
        fake.advance("1h")  # the expiry instant itself refuses the answer
        for response in (client.get(ANSWER_URL), answer(client, approval.wake)):
            assert response.status_code == 410
            assert "expired" in response.content.decode()
            assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_an_approval_whose_expiry_already_fired_gets_410(
    client: Client, approval: django_wakes.ApprovalRequest
) -> None:
    open_link(client, approval.token)
    Wake.objects.filter(pk=approval.wake.pk).update(state=State.EXPIRED, expires_at=START)
    assert client.get(ANSWER_URL).status_code == 410
    assert answer(client, approval.wake).status_code == 410
    assert refused_link(client, approval.token, "expired").status_code == 410


def test_an_unknown_token_gets_404(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    unknown = approval.token[::-1]
    page = refused_link(client, unknown, "not-found")
    assert page.status_code == 404 and "not valid" in page.content.decode()
    assert_guarded(page, unknown)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_an_approval_gone_from_the_table_gets_404(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    """The browser keeps the hash of an approval that gc deleted since: the answer page no longer finds it."""
    gone = request_approval(prompt="Soon deleted")
    open_link(client, gone.token)
    Wake.objects.filter(pk=gone.wake.pk).delete()
    for response in (client.get(ANSWER_URL), answer(client, gone.wake.pk)):
        assert response.status_code == 404
        assert "not valid" in response.content.decode()
        assert_guarded(response, gone.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_nothing_in_the_session_gets_404(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    for response in (client.get(ANSWER_URL), answer(client, approval.wake)):
        assert response.status_code == 404
        assert "not valid" in response.content.decode()
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_a_denied_actor_gets_403(client: Client, approval: django_wakes.ApprovalRequest, settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": lambda actor, workspace_id: False}
    open_link(client, approval.token)
    for response in (client.get(ANSWER_URL), answer(client, approval.wake)):
        assert response.status_code == 403
        assert "Deploy" not in response.content.decode()  # the prompt is not shown to the unauthorized
        assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_the_project_hook_decides_who_may_answer(
    django_user_model: Any, approval: django_wakes.ApprovalRequest
) -> None:
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob"))
    open_link(bob, approval.token)
    assert bob.get(ANSWER_URL).status_code == 403
    demo = Client()
    demo.force_login(django_user_model.objects.create_user("demo"))
    assert open_and_answer(demo, approval).status_code == 200
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "demo"


def test_no_authorize_hook_means_no_one_may_answer(
    client: Client, approval: django_wakes.ApprovalRequest, settings: Any
) -> None:
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    open_link(client, approval.token)
    assert client.get(ANSWER_URL).status_code == 403
    assert answer(client, approval.wake).status_code == 403


def test_csrf_is_enforced(alice: Any, approval: django_wakes.ApprovalRequest) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    open_link(strict, approval.token)
    assert answer(strict, approval.wake).status_code == 403
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None
    assert strict.get(ANSWER_URL).status_code == 200  # sets the CSRF cookie
    csrf = strict.cookies[django_settings.CSRF_COOKIE_NAME].value
    assert answer(strict, approval.wake, csrfmiddlewaretoken=csrf).status_code == 200
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "alice"


def test_a_csrf_failure_leaks_no_token(
    alice: Any, approval: django_wakes.ApprovalRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """Django logs a CSRF refusal with its path: the answer page's path, which holds no token."""
    caplog.set_level(logging.DEBUG)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    open_link(strict, approval.token)
    refused = answer(strict, approval.wake)
    assert refused.status_code == 403
    assert refused.wsgi_request.get_full_path() == ANSWER_URL
    assert approval.token not in refused.content.decode()
    csrf_logs = [r for r in caplog.records if r.name == "django.security.csrf"]
    assert csrf_logs and all(ANSWER_URL in r.getMessage() for r in csrf_logs)
    assert approval.token not in caplog.text


def test_other_methods_are_not_allowed(client: Client, approval: django_wakes.ApprovalRequest) -> None:
    open_link(client, approval.token)
    response = client.put(ANSWER_URL)
    assert response.status_code == 405
    assert response["Referrer-Policy"] == "same-origin"
    assert client.post(link(approval.token)).status_code == 405  # the link is only ever followed (GET)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_the_token_is_never_logged(
    alice: Any, client: Client, approval: django_wakes.ApprovalRequest, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    open_link(strict, approval.token)
    assert answer(strict, approval.wake).status_code == 403  # CSRF refusal
    assert refused_link(client, approval.token[::-1], "not-found").status_code == 404
    assert client.get(ANSWER_URL).status_code == 404
    open_link(client, approval.token)
    assert client.put(ANSWER_URL).status_code == 405
    assert answer(client, approval.wake, decision="maybe").status_code == 400
    assert answer(client, approval.wake).status_code == 200
    assert refused_link(client, approval.token, "answered").status_code == 409
    assert answer(client, approval.wake).status_code == 404  # the browser forgot it after the answer
    with fake_clock(timezone.now() - timedelta(days=1)):  # it expired a day later: 23 hours ago
        expired = request_approval(expires_in="1h")
    assert refused_link(client, expired.token, "expired").status_code == 410
    waiting = request_approval(prompt="Another one")
    open_link(client, waiting.token)
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": lambda actor, workspace_id: False}
    assert client.get(ANSWER_URL).status_code == 403
    assert caplog.records, "expected the refusals and the answer to be logged (without the token)"
    assert any(r.name == "django.request" and "/wakes/approve/refused/" in r.getMessage() for r in caplog.records)
    assert approval.token not in caplog.text
    assert approval.token[::-1] not in caplog.text
    assert expired.token not in caplog.text and waiting.token not in caplog.text
    assert any("approval answered" in r.getMessage() and "by=alice" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
def test_a_link_opened_while_the_database_cannot_be_read_redirects_and_logs_no_token(
    approval: django_wakes.ApprovalRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """A 500 at the link's URL would be logged (and mailed to ADMINS) with the path, token and all."""
    from django.db import connection

    caplog.set_level(logging.DEBUG)
    table = connection.ops.quote_name(Wake._meta.db_table)
    with connection.cursor() as cursor:  # the database really refuses the read: the table is not there
        cursor.execute(f"ALTER TABLE {table} RENAME TO {connection.ops.quote_name('wakes_away')}")
    try:
        response = Client().get(link(approval.token))
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {connection.ops.quote_name('wakes_away')} RENAME TO {table}")
    assert response.status_code == 302 and response["Location"] == "/wakes/approve/refused/unavailable/"
    assert "sessionid" not in response.cookies
    page = Client().get(response["Location"])
    assert page.status_code == 503 and b"Try again later" in page.content
    assert approval.token not in caplog.text
    assert any("could not be read" in r.getMessage() for r in caplog.records)
