"""``request_approval`` + ``resolve``: one-time hashed tokens, authorization, CAS, expiry."""

from __future__ import annotations

import logging
import pprint
from datetime import timedelta

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalExpired,
    ApprovalNotFound,
    IdempotencyConflict,
    InvalidIntent,
)
from django_wakes.models import Outcome, State, Wake, WakeAttempt

pytestmark = pytest.mark.django_db

KIND = "test.approval"
WS = "ws-approval"
TICK = timedelta(microseconds=1)


def row(wake):
    return Wake.objects.get(pk=wake.pk)


@pytest.fixture
def authorize(settings):
    """An AUTHORIZE hook that allows actors listed per workspace and records every question."""
    asked = []
    allowed = {WS: {"alice", "bob"}}

    def hook(actor, workspace_id):
        asked.append((actor, workspace_id))
        return actor in allowed.get(workspace_id, set())

    settings.WAKES = {**settings.WAKES, "AUTHORIZE": hook}
    return asked


def request(**extra):
    return django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="Deploy to prod?", expires_in="1h", **extra)


def test_resolve_fires_the_wake_with_the_answer(clock, sinks, authorize):
    calls = sinks(KIND)
    req = request(intent={"pr": 12})
    assert django_wakes.run_due().claimed == 0  # waiting for a human
    clock.advance("10m")
    wake = django_wakes.resolve(req.token, {"approved": True, "note": "lgtm"}, "alice")
    assert wake.pk == req.wake.pk
    assert wake.fire_at == wake.due_at == clock.now()
    assert wake.state == State.PENDING
    assert authorize == [("alice", WS)]
    assert django_wakes.run_due().fired == 1
    assert calls.results == [
        {"trigger": "on_approval", "answer": {"approved": True, "note": "lgtm"}, "resolved_by": "alice"}
    ]
    assert row(req.wake).state == State.FIRED


def test_second_resolve_gets_already_resolved(clock, sinks, authorize):
    calls = sinks(KIND)
    req = request()
    django_wakes.resolve(req.token, "yes", "alice")
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.resolve(req.token, "no", "bob")
    django_wakes.run_due()
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.resolve(req.token, "no", "bob")
    assert calls.results == [{"trigger": "on_approval", "answer": "yes", "resolved_by": "alice"}]
    assert row(req.wake).result["answer"] == "yes"


def test_resolve_without_authorize_hook_is_denied_never_allow_all(clock, sinks, settings):
    calls = sinks(KIND)
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    req = request()
    with pytest.raises(ApprovalDenied, match="AUTHORIZE"):
        django_wakes.resolve(req.token, "yes", "admin")
    untouched = row(req.wake)
    assert untouched.result is None and untouched.fire_at is None and untouched.state == State.PENDING
    django_wakes.run_due()
    assert calls == []


def test_resolve_by_an_unauthorized_actor_is_denied_and_changes_nothing(clock, sinks, authorize):
    sinks(KIND)
    req = request()
    with pytest.raises(ApprovalDenied, match="mallory"):
        django_wakes.resolve(req.token, "yes", "mallory")
    assert row(req.wake).fire_at is None
    # the token stays usable for someone allowed
    django_wakes.resolve(req.token, "yes", "bob")
    assert row(req.wake).result["resolved_by"] == "bob"


def test_actor_with_get_username_is_named_by_it(clock, sinks, settings):
    sinks(KIND)

    class User:
        def get_username(self):
            return "carol"

        def __str__(self):
            return "not-this"

    settings.WAKES = {**settings.WAKES, "AUTHORIZE": lambda actor, ws: True}
    req = request()
    django_wakes.resolve(req.token, "ok", User())
    assert row(req.wake).result == {"trigger": "on_approval", "answer": "ok", "resolved_by": "carol"}


@pytest.mark.parametrize("token", ["", "nope", None, 123])
def test_unknown_token_is_not_found(clock, sinks, authorize, token):
    sinks(KIND)
    request()
    with pytest.raises(ApprovalNotFound):
        django_wakes.resolve(token, "yes", "alice")


def test_the_token_hash_alone_does_not_resolve(clock, sinks, authorize):
    sinks(KIND)
    req = request()
    with pytest.raises(ApprovalNotFound):
        django_wakes.resolve(row(req.wake).token_hash, "yes", "alice")


def test_answer_must_be_json(clock, sinks, authorize):
    sinks(KIND)
    req = request()
    with pytest.raises(InvalidIntent):
        django_wakes.resolve(req.token, {"when": object()}, "alice")
    assert row(req.wake).fire_at is None


def test_answer_one_tick_before_expiry_wins(clock, sinks, authorize):
    calls = sinks(KIND)
    req = request()
    clock.advance(timedelta(hours=1) - TICK)
    django_wakes.resolve(req.token, "yes", "alice")
    clock.advance("1m")
    report = django_wakes.run_due()
    assert report.fired == 1 and report.expired == 0
    assert calls.results == [{"trigger": "on_approval", "answer": "yes", "resolved_by": "alice"}]


def test_answer_at_the_expiry_instant_is_refused(clock, sinks, authorize):
    calls = sinks(KIND)
    req = request()
    clock.advance("1h")
    with pytest.raises(ApprovalExpired):
        django_wakes.resolve(req.token, "yes", "alice")
    assert row(req.wake).result is None
    report = django_wakes.run_due()
    assert report.expired == 1 and report.fired == 0
    assert calls.results == [{"trigger": "on_approval", "expired": True}]
    assert row(req.wake).state == State.EXPIRED
    with pytest.raises(ApprovalExpired):
        django_wakes.resolve(req.token, "yes", "alice")


def test_unanswered_approval_expires_once_to_its_own_sink(clock, sinks, authorize):
    calls = sinks(KIND)
    req = request()
    clock.advance("1h")
    django_wakes.run_due()
    clock.advance("1d")
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_approval", "expired": True}]
    assert list(WakeAttempt.objects.filter(wake_id=req.wake.pk).values_list("outcome", flat=True)) == [Outcome.EXPIRED]


def test_resolving_a_cancelled_approval_is_already_resolved(clock, sinks, authorize):
    sinks(KIND)
    req = request()
    assert django_wakes.cancel(req.wake.pk)
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.resolve(req.token, "yes", "alice")
    assert row(req.wake).state == State.CANCELLED


def test_an_idempotent_replay_returns_the_approval_and_rotates_nothing(clock, sinks, authorize):
    calls = sinks(KIND)
    first = request(idempotency_key="approve-deploy-7")
    second = request(idempotency_key="approve-deploy-7")
    assert second.wake.pk == first.wake.pk and second.token is None  # no second token, none rotated
    assert Wake.objects.count() == 1
    assert row(first.wake).token_hash == engine.hash_token(first.token)  # the link already sent still opens it
    django_wakes.resolve(first.token, "yes", "alice")
    django_wakes.run_due()
    assert len(calls) == 1


def test_a_replay_from_another_session_neither_returns_nor_rotates_the_approval(clock, sinks, authorize):
    calls = sinks(KIND)
    theirs = request(session_id="s1", idempotency_key="k")
    for other in ("s2", None):
        with pytest.raises(IdempotencyConflict):
            request(session_id=other, idempotency_key="k")
    assert row(theirs.wake).token_hash == engine.hash_token(theirs.token)
    django_wakes.resolve(theirs.token, "yes", "alice")
    django_wakes.run_due()
    assert calls.ids == [theirs.wake.pk]


def test_a_replay_that_asks_something_else_rotates_nothing(clock, sinks, authorize):
    sinks(KIND)
    first = request(idempotency_key="k", intent={"pr": 1})
    with pytest.raises(IdempotencyConflict):
        django_wakes.request_approval(
            workspace_id=WS, kind=KIND, prompt="Drop it?", expires_in="1h", idempotency_key="k", intent={"pr": 1}
        )
    with pytest.raises(IdempotencyConflict):
        request(idempotency_key="k", intent={"pr": 2})
    watch = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", idempotency_key="w")
    with pytest.raises(IdempotencyConflict):
        request(idempotency_key="w")  # a watch is no approval: it gets no token
    assert row(watch).token_hash is None and Wake.objects.count() == 2
    assert row(first.wake).token_hash == engine.hash_token(first.token)
    django_wakes.resolve(first.token, "yes", "alice")


def test_idempotent_request_after_resolution_does_not_reopen_it(clock, sinks, authorize):
    sinks(KIND)
    first = request(idempotency_key="k")
    django_wakes.resolve(first.token, "yes", "alice")
    again = request(idempotency_key="k")
    assert again.wake.pk == first.wake.pk and again.token is None
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.resolve(first.token, "no", "bob")
    assert row(first.wake).result["answer"] == "yes"


def test_two_resolves_only_one_wins_the_cas(clock, sinks, authorize, settings):
    """Both callers pass the read and the authorization; the conditional UPDATE picks one winner."""
    sinks(KIND)
    req = request()
    outcomes = []
    from django_wakes import conf

    original = conf.wakes_settings.get("AUTHORIZE")

    def racing_authorize(actor, workspace_id):
        # while "bob" is being authorized, "alice" resolves: bob's UPDATE must then lose
        if actor == "bob" and not outcomes:
            outcomes.append(django_wakes.resolve(req.token, "alice-answer", "alice").pk)
        return original(actor, workspace_id)

    settings.WAKES = {**settings.WAKES, "AUTHORIZE": racing_authorize}
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.resolve(req.token, "bob-answer", "bob")
    assert outcomes == [req.wake.pk]
    assert row(req.wake).result == {"trigger": "on_approval", "answer": "alice-answer", "resolved_by": "alice"}


def test_an_approval_request_shows_its_wake_never_its_token(sinks, caplog):
    """``logger.info("%r", req)``, an f-string, a debug page's locals: the token appears in none of them."""
    sinks(KIND)
    req = request()
    shown = [repr(req), str(req), f"{req!r}", f"{req}", repr([req]), pprint.pformat({"req": req})]
    for text in shown:
        assert req.token not in text and req.token[:12] not in text, text
        assert f"wake {req.wake.pk}" in text and "token=<hidden>" in text, text
    caplog.set_level(logging.DEBUG, logger="django_wakes")
    logging.getLogger("django_wakes").info("approval requested %r (%s)", req, req)
    assert caplog.records and req.token not in caplog.text and req.token not in caplog.records[-1].getMessage()
    assert engine.hash_token(req.token) == row(req.wake).token_hash  # .token is still the token to send
    assert django_wakes.ApprovalRequest(wake=req.wake, token=req.token) == req  # and the request still a value


def test_a_claim_shows_its_wake_never_its_claim_token(clock, sinks):
    """The claim token, the compare-and-swap identity the console never shows, stays out of a claim's repr too."""
    sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1s")
    clock.advance("2s")
    (claim,) = engine.claim_batch(runner_id="runner-a")
    assert claim.token and claim.token == row(wake).claim_token
    assert claim.token not in repr(claim) and claim.token not in str(claim)
    assert f"wake {wake.pk}" in repr(claim)
    engine.release(claim)
