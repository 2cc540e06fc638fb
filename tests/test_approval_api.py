"""The JSON approval API through real HTTP requests: the session user under CSRF, or WAKES["API_AUTH"].

Every response code, the sink's answer after run_due(), CSRF on the session path and not on the
API_AUTH path, the token never in a log line, the API_AUTH check (E002), and the documented curl
example against a live server.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

import django_wakes
from django_wakes.checks import check_wakes_settings
from django_wakes.models import State, Wake
from django_wakes.testing import fake_clock

pytestmark = pytest.mark.django_db

KIND = "test.approval_api"
WORKSPACE = "team-alice"  # testproject.wakes.authorize: a user whose name is in the workspace id may answer
PASSWORD = "correct horse battery staple"
URL = "/wakes/approvals/api/"
BOT_KEY = "bot-key-Qm4t9"
CSRF = "a" * 32  # any 32 letters/digits: a CSRF secret the cookie and the header agree on
DOCS = Path(__file__).resolve().parent.parent / "docs" / "events.md"


def bearer_actor(request: Any) -> str | None:
    """An API_AUTH: the bot's key in Authorization; the person it acts for in X-On-Behalf-Of."""
    if request.headers.get("Authorization") != f"Bearer {BOT_KEY}":
        return None
    return request.headers.get("X-On-Behalf-Of") or None


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def calls(sinks: Any) -> Any:
    return sinks(KIND)


def request_approval(**overrides: Any) -> django_wakes.ApprovalRequest:
    fields: dict[str, Any] = {"workspace_id": WORKSPACE, "prompt": "Deploy?", "expires_in": "1h", "kind": KIND}
    return django_wakes.request_approval(**{**fields, **overrides})


@pytest.fixture
def approval(calls: Any) -> django_wakes.ApprovalRequest:
    return request_approval()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD)


@pytest.fixture
def client(alice: Any) -> Client:
    """Alice's browser session (Django's test client skips CSRF checks unless told otherwise)."""
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bot(settings: Any) -> Client:
    settings.WAKES = {**settings.WAKES, "API_AUTH": "tests.test_approval_api.bearer_actor"}
    return Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {BOT_KEY}", "X-On-Behalf-Of": "alice"})


def post(client: Client, body: Any, **extra: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(URL, data=data, content_type=extra.pop("content_type", "application/json"), **extra)


def answer(token: str, approved: Any = True, **fields: Any) -> dict[str, Any]:
    return {"token": token, "approved": approved, **fields}


def error(response: Any) -> str:
    assert response["Content-Type"] == "application/json"
    return str(response.json()["error"])


def test_the_url_is_named():
    assert reverse("django_wakes:approval_api") == URL


# -- 200 -----------------------------------------------------------------------------------------


def test_the_session_user_answers_and_the_sink_gets_the_answer(client, approval, calls):
    response = post(client, answer(approval.token, True, comment="ship it"))
    assert response.status_code == 200
    assert response.json() == {"wake": approval.wake.pk, "approved": True}
    assert "no-cache" in response["Cache-Control"]
    assert django_wakes.run_due().fired == 1
    assert calls.results == [
        {"trigger": "on_approval", "answer": {"approved": True, "comment": "ship it"}, "resolved_by": "alice"}
    ]


def test_a_rejection_without_a_comment(client, approval):
    assert post(client, answer(approval.token, False)).json() == {"wake": approval.wake.pk, "approved": False}
    assert Wake.objects.get(pk=approval.wake.pk).result["answer"] == {"approved": False, "comment": ""}


# -- authentication and CSRF ---------------------------------------------------------------------


def test_anonymous_is_401_json_not_a_redirect(approval):
    response = post(Client(), answer(approval.token))
    assert (response.status_code, error(response)) == (401, "unauthorized")
    assert response["WWW-Authenticate"] == 'Session realm="django-wakes"'
    assert "Location" not in response
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_a_session_post_without_the_csrf_token_is_403(alice, approval):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = post(browser, answer(approval.token))
    assert (response.status_code, error(response)) == (403, "csrf_failed")
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_a_session_post_with_the_csrf_token_answers(alice, approval):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    browser.cookies["csrftoken"] = CSRF
    response = post(browser, answer(approval.token), HTTP_X_CSRFTOKEN=CSRF)
    assert response.status_code == 200
    wrong = post(browser, answer(approval.token), HTTP_X_CSRFTOKEN="b" * 32)
    assert (wrong.status_code, error(wrong)) == (403, "csrf_failed")


def test_api_auth_answers_without_csrf(bot, approval, calls):
    response = post(bot, answer(approval.token))
    assert response.json() == {"wake": approval.wake.pk, "approved": True}
    django_wakes.run_due()
    assert calls.results[0]["resolved_by"] == "alice"


def test_api_auth_returning_none_is_401(bot, approval):
    response = post(bot, answer(approval.token), HTTP_AUTHORIZATION="Bearer wrong")
    assert (response.status_code, error(response)) == (401, "unauthorized")
    assert response["WWW-Authenticate"] == 'Bearer realm="django-wakes"'


def test_with_api_auth_the_session_alone_does_not_authenticate(bot, client, approval):
    """API_AUTH decides alone: a logged-in browser without the bot's credentials is not let in (no CSRF then)."""
    response = post(client, answer(approval.token))
    assert (response.status_code, error(response)) == (401, "unauthorized")
    assert response["WWW-Authenticate"] == 'Bearer realm="django-wakes"'


def test_api_auth_may_be_a_callable(settings, approval):
    settings.WAKES = {**settings.WAKES, "API_AUTH": lambda request: "alice"}
    assert post(Client(enforce_csrf_checks=True), answer(approval.token)).status_code == 200


def test_a_bad_api_auth_is_e002(settings):
    settings.WAKES = {**settings.WAKES, "API_AUTH": "no.such.function"}
    assert "django_wakes.E002" in [m.id for m in check_wakes_settings()]


# -- refusals: 403, 404, 409, 410 ----------------------------------------------------------------


def test_an_actor_authorize_refuses_is_403(django_user_model, approval):
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob", password=PASSWORD))
    response = post(bob, answer(approval.token))
    assert (response.status_code, error(response)) == (403, "forbidden")
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_no_authorize_hook_is_403(client, approval, settings):
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    response = post(client, answer(approval.token))
    assert (response.status_code, error(response)) == (403, "forbidden")
    assert "AUTHORIZE" not in response.json()["detail"]  # the configuration is not described to callers


@pytest.mark.parametrize("token", ["no-such-token", "x" * 5000, "\u00e9t\u00e9"])
def test_an_unknown_token_is_404(client, approval, token):
    response = post(client, answer(token))
    assert (response.status_code, error(response)) == (404, "not_found")


def test_the_same_answer_again_by_the_same_actor_is_200_with_the_recorded_answer(client, approval, calls):
    """A client whose first response was lost retries: it is told the answer stands, and nothing fires twice."""
    first = post(client, answer(approval.token, True, comment="ship it"))
    assert first.json() == {"wake": approval.wake.pk, "approved": True}
    again = post(client, answer(approval.token, True, comment="ship it"))
    assert (again.status_code, again.json()) == (200, {"wake": approval.wake.pk, "approved": True, "duplicate": True})
    assert django_wakes.run_due().fired == 1
    assert post(client, answer(approval.token, True, comment="ship it")).json()["duplicate"] is True  # after firing
    assert len(calls) == 1


def test_a_different_answer_is_409_and_says_what_was_recorded(client, approval):
    assert post(client, answer(approval.token, True, comment="ship it")).status_code == 200
    response = post(client, answer(approval.token, False))
    assert (response.status_code, error(response)) == (409, "already_answered")
    assert response.json()["detail"] == "This approval was already answered: approved by alice."
    assert response.json()["recorded"] == {"approved": True, "comment": "ship it", "by": "alice", "defaulted": False}
    assert post(client, answer(approval.token, True, comment="another comment")).status_code == 409
    assert Wake.objects.get(pk=approval.wake.pk).result["answer"] == {"approved": True, "comment": "ship it"}


def test_the_same_answer_by_another_actor_is_409(client, approval, django_user_model):
    assert post(client, answer(approval.token, True)).status_code == 200
    team = Client()
    team.force_login(django_user_model.objects.create_user("team", password=PASSWORD))  # may answer team-alice's
    response = post(team, answer(approval.token, True))
    assert (response.status_code, error(response)) == (409, "already_answered")
    assert response.json()["recorded"]["by"] == "alice"


def test_an_actor_authorize_refuses_is_told_nothing_of_the_answer(client, approval, django_user_model):
    assert post(client, answer(approval.token, True, comment="secret plans")).status_code == 200
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob", password=PASSWORD))
    response = post(bob, answer(approval.token, True, comment="secret plans"))
    assert (response.status_code, error(response)) == (403, "forbidden")
    assert "secret plans" not in response.content.decode()


def test_a_cancelled_approval_is_409(client, approval):
    assert django_wakes.cancel(approval.wake.pk)
    response = post(client, answer(approval.token))
    assert (response.status_code, error(response)) == (409, "already_answered")
    assert response.json()["detail"] == "This approval was cancelled."


def test_an_answer_after_the_default_on_expiry_is_409(client, calls):
    with fake_clock(datetime(2031, 1, 1, tzinfo=UTC)) as clock:
        approval = request_approval(on_expiry={"approved": False, "comment": ""})
        clock.advance("2h")
        assert django_wakes.run_due().fired == 1
        response = post(client, answer(approval.token, False))
    assert (response.status_code, error(response)) == (409, "already_answered")
    assert response.json()["detail"] == "This approval was already answered: rejected by default on expiry."
    assert response.json()["recorded"] == {"approved": False, "comment": "", "by": None, "defaulted": True}


def test_an_expired_approval_is_410(client, calls):
    with fake_clock(datetime(2030, 1, 1, tzinfo=UTC)) as fake:
        approval = request_approval(expires_in="1h")
        fake.advance("1h")  # the expiry instant itself refuses the answer
        response = post(client, answer(approval.token))
    assert (response.status_code, error(response)) == (410, "expired")
    assert Wake.objects.get(pk=approval.wake.pk).state == State.PENDING


# -- 400, 405, 413, 415 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "bad_json"),
        (b"\xff", "bad_json"),
        (b"{}", "bad_request"),
        (b'["token", true]', "bad_json"),
        (b'{"token": "t", "approved": NaN}', "bad_json"),
        ({"approved": True}, "bad_request"),
        ({"token": "", "approved": True}, "bad_request"),
        ({"token": 7, "approved": True}, "bad_request"),
        ({"token": "t"}, "bad_request"),
        ({"token": "t", "approved": "true"}, "bad_request"),
        ({"token": "t", "approved": 1}, "bad_request"),
        ({"token": "t", "approved": True, "comment": 5}, "bad_request"),
        ({"token": "t", "approved": True, "comment": "x" * 2001}, "bad_request"),
        ({"token": "t", "approved": True, "actor": "root"}, "bad_request"),
    ],
)
def test_a_bad_body_is_400(client, approval, body, code):
    response = post(client, body)
    assert (response.status_code, error(response)) == (400, code)


def test_an_answer_the_package_refuses_is_400(client, approval):
    """A NUL in the comment: InvalidIntent from the engine's validation, and the approval stays open."""
    response = post(client, answer(approval.token, comment="nul\u0000"))
    assert (response.status_code, error(response)) == (400, "bad_request")
    assert "NUL" in response.json()["detail"]
    assert post(client, answer(approval.token)).status_code == 200


def test_the_longest_comment_is_accepted_even_escaped(client, approval):
    comment = "\U0001f680" * 2000  # json.dumps escapes each as two \uXXXX: 24,000 bytes
    assert post(client, answer(approval.token, comment=comment)).status_code == 200


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete", "head", "options"])
def test_anything_but_post_is_405(client, method):
    response = getattr(client, method)(URL)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    if method != "head":
        assert error(response) == "method_not_allowed"


def test_a_body_over_the_limit_is_413(client, approval):
    response = post(client, answer(approval.token, comment=" " * 30_000))
    assert (response.status_code, error(response)) == (413, "too_large")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_not_json_is_415(bot, approval, content_type):
    """What a cross-site form could send is refused, even on the CSRF-exempt API_AUTH path."""
    response = post(bot, answer(approval.token), content_type=content_type)
    assert (response.status_code, error(response)) == (415, "unsupported_media_type")
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_json_with_a_charset_is_json(client, approval):
    assert post(client, answer(approval.token), content_type="application/json; charset=utf-8").status_code == 200


# -- the token is never logged -------------------------------------------------------------------


def test_the_token_is_in_no_log_line(bot, approval, caplog):
    caplog.set_level(logging.DEBUG)
    other = request_approval()
    responses = [
        post(bot, answer(approval.token), HTTP_X_ON_BEHALF_OF="bob"),  # 403
        post(Client(), answer(approval.token), HTTP_AUTHORIZATION="Bearer wrong"),  # 401
        post(bot, answer(approval.token, comment="x" * 2001)),  # 400
        post(bot, answer(approval.token)),  # 200
        post(bot, answer(approval.token)),  # 200 again: the same answer by the same actor
        post(bot, answer(approval.token, False)),  # 409
        post(bot, answer(other.token[::-1])),  # 404
    ]
    assert [r.status_code for r in responses] == [403, 401, 400, 200, 200, 409, 404]
    text = caplog.text + "".join(r.content.decode() for r in responses)
    assert approval.token not in text and other.token[::-1] not in text
    assert f"approval answered wake={approval.wake.pk} workspace={WORKSPACE} by=alice approved=True via=api" in (
        caplog.text
    )


def test_the_api_writes_no_session(settings, client, approval):
    """Like the approval link, the API keeps nothing for whoever posts: no session row, no cookie."""
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.db"
    before = list(Session.objects.order_by("session_key").values_list("session_key", "session_data"))
    responses = [post(Client(), answer(secrets.token_urlsafe(32))) for _ in range(50)]  # anonymous: 401
    responses += [post(client, answer(secrets.token_urlsafe(32))) for _ in range(5)]  # alice's session: 404
    settings.WAKES = {**settings.WAKES, "API_AUTH": "tests.test_approval_api.bearer_actor"}
    bot_headers = {"Authorization": f"Bearer {BOT_KEY}", "X-On-Behalf-Of": "alice"}
    responses += [post(Client(headers=bot_headers), answer(secrets.token_urlsafe(32))) for _ in range(5)]  # 404
    responses += [post(Client(), answer(secrets.token_urlsafe(32)), HTTP_AUTHORIZATION="Bearer wrong")]  # 401
    responses.append(post(Client(headers=bot_headers), answer(approval.token)))  # 200
    assert [r.status_code for r in responses] == [401] * 50 + [404] * 10 + [401, 200]
    assert not [r.cookies for r in responses if r.cookies]
    assert list(Session.objects.order_by("session_key").values_list("session_key", "session_data")) == before


# -- the documented example ----------------------------------------------------------------------


def documented_block(language: str, containing: str) -> str:
    text = DOCS.read_text()
    section = text[text.index("## The approval API") :]
    for block in re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL):
        if containing in block:
            return str(block)
    raise AssertionError(f"no {language} block with {containing!r} under 'The approval API'")


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
def test_the_documented_api_auth_and_curl_example_works(live_server, settings, monkeypatch, calls):
    namespace: dict[str, Any] = {}
    exec(documented_block("python", "def bot_actor"), namespace)  # the documented API_AUTH function
    settings.WAKES = {**settings.WAKES, "API_AUTH": namespace["bot_actor"]}
    monkeypatch.setenv("WAKES_BOT_KEY", BOT_KEY)
    approval = request_approval()
    script = documented_block("sh", "curl").replace("http://localhost:8000", live_server.url)
    env = {**os.environ, "WAKES_BOT_KEY": BOT_KEY, "TOKEN": approval.token}
    done = subprocess.run(["bash", "-eu", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"wake": approval.wake.pk, "approved": True}
    again = subprocess.run(["bash", "-eu", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert json.loads(again.stdout) == {"wake": approval.wake.pk, "approved": True, "duplicate": True}
    wrong_key = subprocess.run(
        ["bash", "-eu", "-c", script], capture_output=True, text=True, timeout=60, env={**env, "WAKES_BOT_KEY": "nope"}
    )
    assert json.loads(wrong_key.stdout)["error"] == "unauthorized"
    django_wakes.run_due()
    assert calls.results[0]["answer"] == {"approved": True, "comment": "ship it"}
