"""The approval page: who may answer, what each refusal looks like, and that the token does not leak."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.urls import reverse

from django_wakes import engine
from django_wakes.models import State, Wake
from django_wakes.testing import fake_clock

pytestmark = pytest.mark.django_db

KIND = "test.views"
START = datetime(2030, 1, 1, tzinfo=UTC)
WORKSPACE = "team-alice"  # testproject.wakes.authorize lets a user whose name is in the workspace id answer


@pytest.fixture(autouse=True)
def kind(sinks) -> str:
    """Register a sink for this module's kind (conftest restores the registry afterwards)."""
    sinks(KIND)
    return KIND


def request_approval(**overrides: Any) -> engine.ApprovalRequest:
    fields: dict[str, Any] = {
        "workspace_id": WORKSPACE,
        "prompt": "Deploy <b>prod</b> now?",
        "expires_in": "1h",
        "kind": KIND,
        "intent": {"deploy": "prod", "note": "<script>x</script>"},
    }
    return engine.request_approval(**{**fields, **overrides})


@pytest.fixture
def approval() -> engine.ApprovalRequest:
    return request_approval()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password="not-used")


@pytest.fixture
def client(alice: Any) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def url(token: str) -> str:
    return reverse("django_wakes:approve", args=[token])


def answer(client: Client, token: str, decision: str = "approve", comment: str = "", **extra: str) -> Any:
    return client.post(url(token), {"decision": decision, "comment": comment, **extra})


def assert_guarded(response: Any, token: str) -> None:
    """Every response: no referrer, never cached, and the token nowhere in the page."""
    assert response["Referrer-Policy"] == "no-referrer"
    assert "no-store" in response["Cache-Control"]
    assert token not in response.content.decode()


def test_urls_are_namespaced(approval: engine.ApprovalRequest) -> None:
    assert url(approval.token) == f"/wakes/approve/{approval.token}/"


def test_get_shows_the_prompt_and_the_form(client: Client, approval: engine.ApprovalRequest) -> None:
    response = client.get(url(approval.token))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Deploy &lt;b&gt;prod&lt;/b&gt; now?" in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert 'name="decision"' in html and 'name="comment"' in html
    assert 'action=""' in html  # posts to its own URL: the token is not written into the page
    assert_guarded(response, approval.token)


def test_post_resolves_the_approval(client: Client, approval: engine.ApprovalRequest) -> None:
    response = answer(client, approval.token, comment="looks good")
    assert response.status_code == 200
    assert "Thank you" in response.content.decode()
    assert_guarded(response, approval.token)
    wake = Wake.objects.get(pk=approval.wake.pk)
    assert wake.result["answer"] == {"approved": True, "comment": "looks good"}
    assert wake.result["resolved_by"] == "alice"
    assert wake.fire_at is not None and wake.state == State.PENDING  # due now: a runner fires it


def test_post_can_reject(client: Client, approval: engine.ApprovalRequest) -> None:
    assert answer(client, approval.token, decision="reject").status_code == 200
    assert Wake.objects.get(pk=approval.wake.pk).result["answer"] == {"approved": False, "comment": ""}


def test_an_invalid_answer_redisplays_the_form(client: Client, approval: engine.ApprovalRequest) -> None:
    response = answer(client, approval.token, decision="maybe")
    assert response.status_code == 400
    assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_an_answer_too_large_for_the_intent_limit_is_refused(
    client: Client, approval: engine.ApprovalRequest, settings: Any
) -> None:
    settings.WAKES = {**settings.WAKES, "INTENT_MAX_BYTES": 100}
    response = answer(client, approval.token, comment="x" * 500)
    assert response.status_code == 400
    assert "too long" in response.content.decode()
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_users_are_sent_to_log_in(method: str, approval: engine.ApprovalRequest) -> None:
    response = getattr(Client(), method)(url(approval.token), {"decision": "approve"})
    assert response.status_code == 302
    assert response["Location"].startswith(django_settings.LOGIN_URL)
    assert response["Referrer-Policy"] == "no-referrer"
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_a_second_answer_gets_409(client: Client, approval: engine.ApprovalRequest) -> None:
    assert answer(client, approval.token).status_code == 200
    for response in (answer(client, approval.token, decision="reject"), client.get(url(approval.token))):
        assert response.status_code == 409
        assert "already answered" in response.content.decode()
        assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).result["answer"]["approved"] is True


def test_a_cancelled_approval_gets_409(client: Client, approval: engine.ApprovalRequest) -> None:
    engine.cancel(approval.wake.pk)
    assert client.get(url(approval.token)).status_code == 409
    assert answer(client, approval.token).status_code == 409


def test_an_expired_approval_gets_410(client: Client) -> None:
    with fake_clock(START) as fake:
        approval = request_approval(expires_in="1h")
        assert client.get(url(approval.token)).status_code == 200
        fake.advance("1h")  # the expiry instant itself refuses the answer
        for response in (client.get(url(approval.token)), answer(client, approval.token)):
            assert response.status_code == 410
            assert "expired" in response.content.decode()
            assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_an_approval_whose_expiry_already_fired_gets_410(client: Client, approval: engine.ApprovalRequest) -> None:
    Wake.objects.filter(pk=approval.wake.pk).update(state=State.EXPIRED, expires_at=START)
    assert client.get(url(approval.token)).status_code == 410
    assert answer(client, approval.token).status_code == 410


def test_an_unknown_token_gets_404(client: Client, approval: engine.ApprovalRequest) -> None:
    unknown = approval.token[::-1]
    for response in (client.get(url(unknown)), answer(client, unknown)):
        assert response.status_code == 404
        assert "not valid" in response.content.decode()
        assert_guarded(response, unknown)


def test_a_denied_actor_gets_403(client: Client, approval: engine.ApprovalRequest, settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": lambda actor, workspace_id: False}
    for response in (client.get(url(approval.token)), answer(client, approval.token)):
        assert response.status_code == 403
        assert "Deploy" not in response.content.decode()  # the prompt is not shown to the unauthorized
        assert_guarded(response, approval.token)
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None


def test_the_project_hook_decides_who_may_answer(django_user_model: Any, approval: engine.ApprovalRequest) -> None:
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob"))
    assert bob.get(url(approval.token)).status_code == 403
    demo = Client()
    demo.force_login(django_user_model.objects.create_user("demo"))
    assert answer(demo, approval.token).status_code == 200
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "demo"


def test_no_authorize_hook_means_no_one_may_answer(
    client: Client, approval: engine.ApprovalRequest, settings: Any
) -> None:
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    assert client.get(url(approval.token)).status_code == 403
    assert answer(client, approval.token).status_code == 403


def test_csrf_is_enforced(alice: Any, approval: engine.ApprovalRequest) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    refused = answer(strict, approval.token)
    assert refused.status_code == 403
    assert refused["Referrer-Policy"] == "no-referrer"
    assert Wake.objects.get(pk=approval.wake.pk).fire_at is None
    assert strict.get(url(approval.token)).status_code == 200  # sets the CSRF cookie
    csrf = strict.cookies[django_settings.CSRF_COOKIE_NAME].value
    assert answer(strict, approval.token, csrfmiddlewaretoken=csrf).status_code == 200
    assert Wake.objects.get(pk=approval.wake.pk).result["resolved_by"] == "alice"


def test_other_methods_are_not_allowed(client: Client, approval: engine.ApprovalRequest) -> None:
    response = client.put(url(approval.token))
    assert response.status_code == 405
    assert response["Referrer-Policy"] == "no-referrer"


def test_the_token_is_never_logged(
    alice: Any, client: Client, approval: engine.ApprovalRequest, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    assert answer(strict, approval.token).status_code == 403  # CSRF refusal
    assert client.get(url(approval.token[::-1])).status_code == 404
    assert client.put(url(approval.token)).status_code == 405
    assert answer(client, approval.token, decision="maybe").status_code == 400
    assert answer(client, approval.token).status_code == 200
    assert answer(client, approval.token).status_code == 409
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": lambda actor, workspace_id: False}
    assert client.get(url(approval.token)).status_code == 403
    assert caplog.records, "expected the refusals and the answer to be logged (without the token)"
    assert approval.token not in caplog.text
    assert approval.token[::-1] not in caplog.text
    assert any("approval answered" in r.getMessage() and "by=alice" in r.getMessage() for r in caplog.records)
