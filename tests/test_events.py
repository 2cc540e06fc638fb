"""``watch`` + ``deliver_event``: one delivery per watcher, exclusive expiry boundary, scoping."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.models import Outcome, State, Wake, WakeAttempt

pytestmark = pytest.mark.django_db

KIND = "test.events"
WS = "ws-events"
TICK = timedelta(microseconds=1)


def row(wake):
    return Wake.objects.get(pk=wake.pk)


def test_event_fires_its_watcher_with_the_payload(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="ci.passed", intent={"then": "merge"})
    assert row(wake).due_at is None  # without an expiry nothing is due until the event comes
    clock.advance("3d")
    assert django_wakes.run_due().claimed == 0

    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci.passed", payload={"build": 7}) == 1
    delivered = row(wake)
    assert delivered.state == State.PENDING
    assert delivered.fire_at == delivered.due_at == clock.now()
    report = django_wakes.run_due()
    assert report.fired == 1
    assert calls.results == [{"trigger": "on_event", "event_key": "ci.passed", "payload": {"build": 7}}]
    assert row(wake).state == State.FIRED


def test_payload_defaults_to_none(clock, sinks):
    calls = sinks(KIND)
    django_wakes.watch(workspace_id=WS, kind=KIND, event_key="ping")
    django_wakes.deliver_event(workspace_id=WS, event_key="ping")
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "event_key": "ping", "payload": None}]


def test_a_watcher_accepts_only_the_first_delivery(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e")
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e", payload=1) == 1
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e", payload=2) == 0
    django_wakes.run_due()
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e", payload=3) == 0
    clock.advance("1h")
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "event_key": "e", "payload": 1}]
    assert row(wake).state == State.FIRED
    assert WakeAttempt.objects.filter(wake_id=wake.pk).count() == 1


def test_one_event_triggers_every_watcher_of_its_key_in_its_workspace_only(clock, sinks):
    calls = sinks(KIND)
    w1 = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="deploy")
    w2 = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="deploy")
    other_key = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="deploy.other")
    other_ws = django_wakes.watch(workspace_id="ws-elsewhere", kind=KIND, event_key="deploy")
    assert django_wakes.deliver_event(workspace_id=WS, event_key="deploy", payload="v2") == 2
    assert django_wakes.run_due().fired == 2
    assert sorted(calls.ids) == sorted([w1.pk, w2.pk])
    assert row(other_key).state == row(other_ws).state == State.PENDING
    assert row(other_ws).result is None


def test_deliver_event_ignores_time_wakes(clock, sinks):
    sinks(KIND)
    timed = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h")
    assert django_wakes.deliver_event(workspace_id=WS, event_key="anything") == 0
    assert row(timed).result is None


def test_event_landing_one_tick_before_expiry_is_accepted(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_in="10m")
    clock.advance(timedelta(minutes=10) - TICK)
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e", payload="just in time") == 1
    clock.advance("1m")  # the runner gets to it after the expiry: still the event, not an expiry
    report = django_wakes.run_due()
    assert report.fired == 1 and report.expired == 0
    assert calls.results == [{"trigger": "on_event", "event_key": "e", "payload": "just in time"}]
    assert row(wake).state == State.FIRED


def test_event_landing_at_the_expiry_instant_is_refused(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_in="10m")
    clock.advance("10m")
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e", payload="too late") == 0
    assert row(wake).result is None and row(wake).fire_at is None
    report = django_wakes.run_due()
    assert report.expired == 1 and report.fired == 0
    assert calls.results == [{"trigger": "on_event", "expired": True}]
    assert row(wake).state == State.EXPIRED


def test_an_expired_watch_notifies_its_own_sink_exactly_once(clock, sinks):
    mine = sinks(KIND)
    other = sinks("test.events.other")
    django_wakes.watch(workspace_id=WS, kind="test.events.other", event_key="e")
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_in="1h")
    clock.advance(timedelta(hours=1) - TICK)
    assert django_wakes.run_due().claimed == 0
    clock.advance(TICK)
    assert django_wakes.run_due().expired == 1
    accepted = []
    for _ in range(3):
        clock.advance("1h")
        assert django_wakes.run_due().claimed == 0
        accepted.append(django_wakes.deliver_event(workspace_id=WS, event_key="e"))
        django_wakes.run_due()
    assert accepted == [1, 0, 0]  # only the other (unexpiring) watcher takes the event, once
    assert mine.results == [{"trigger": "on_event", "expired": True}]
    assert [r["trigger"] for r in other.results] == ["on_event"]
    assert "expired" not in other.results[0]
    settled = row(wake)
    assert settled.state == State.EXPIRED
    assert list(WakeAttempt.objects.filter(wake_id=wake.pk).values_list("outcome", flat=True)) == [Outcome.EXPIRED]


def test_an_event_after_expiry_does_not_fire_an_expired_watch(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_in="1m")
    clock.advance("2m")
    django_wakes.run_due()
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e") == 0
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "expired": True}]
    assert row(wake).state == State.EXPIRED


def test_expiry_in_the_past_before_any_runner_ran_still_refuses_the_event(clock, sinks):
    """Expiry is decided by the clock, not by whether a runner already noticed it."""
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_in="1m")
    clock.advance("5m")
    assert row(wake).state == State.PENDING  # no runner has looked yet
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e") == 0
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "expired": True}]


def test_event_for_a_firing_or_cancelled_watch_is_refused(clock, sinks):
    sinks(KIND)
    cancelled = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="c")
    django_wakes.cancel(cancelled.pk)
    assert django_wakes.deliver_event(workspace_id=WS, event_key="c") == 0
    expiring = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="x", expires_in="1m")
    clock.advance("1m")
    (claim,) = engine.claim_batch(runner_id="A")  # claimed as an expiry, now firing
    assert claim.wake.pk == expiring.pk and claim.expired
    assert django_wakes.deliver_event(workspace_id=WS, event_key="x") == 0
    engine.fire(claim)
    assert row(expiring).state == State.EXPIRED
    assert row(expiring).result == {"trigger": "on_event", "expired": True}


def test_deliver_event_sends_wakes_due_on_commit(clock, sinks, django_capture_on_commit_callbacks):
    from django_wakes import signals

    seen = []

    def on_due(sender, due_at, **kwargs):
        seen.append(due_at)

    signals.wakes_due.connect(on_due)
    try:
        sinks(KIND)
        django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e")
        with django_capture_on_commit_callbacks(execute=True):
            django_wakes.deliver_event(workspace_id=WS, event_key="nobody-watches")
        assert seen == []
        with django_capture_on_commit_callbacks(execute=True):
            django_wakes.deliver_event(workspace_id=WS, event_key="e")
        assert seen == [clock.now()]
    finally:
        signals.wakes_due.disconnect(on_due)


def test_watch_idempotency_key_returns_the_existing_watch(clock, sinks):
    sinks(KIND)
    first = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", idempotency_key="watch-1")
    again = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", idempotency_key="watch-1")
    assert again.pk == first.pk
    assert Wake.objects.count() == 1
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e") == 1
