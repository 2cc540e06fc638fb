"""The core state machine: due times, one-shot firing, CAS transitions, expiry, cancel, RunReport."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.engine import notify
from django_wakes.exceptions import IdempotencyConflict
from django_wakes.models import Outcome, State, TriggerType, Wake, WakeAttempt

pytestmark = pytest.mark.django_db

KIND = "test.engine"
WS = "ws-engine"
TICK = timedelta(microseconds=1)


def row(wake):
    return Wake.objects.get(pk=wake.pk)


# --------------------------------------------------------------------------------------------------
# Never early, never twice
# --------------------------------------------------------------------------------------------------


def test_never_early_not_due_one_tick_before_fire_at_and_due_at_it(clock, sinks):
    calls = sinks(KIND)
    fire_at = clock.now() + timedelta(minutes=10)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, at=fire_at)

    clock.set(fire_at - TICK)
    report = django_wakes.run_due()
    assert report.fired == 0 and report.claimed == 0
    assert calls == []
    assert row(wake).state == State.PENDING
    assert engine.claim_batch(runner_id="peek") == []
    assert report.next_at == fire_at

    clock.set(fire_at)
    report = django_wakes.run_due()
    assert report.fired == 1
    assert calls.ids == [wake.pk]
    assert calls.results == [{"trigger": "at"}]
    settled = row(wake)
    assert settled.state == State.FIRED
    assert settled.settled_at == fire_at
    assert settled.attempts == 1
    assert settled.result == {"trigger": "at"}
    assert settled.lease_until is None and settled.claim_token is None


def test_delay_is_relative_to_the_clock(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="90s")
    clock.advance(timedelta(seconds=90) - TICK)
    django_wakes.run_due()
    assert calls == []
    clock.advance(TICK)
    django_wakes.run_due()
    assert calls.ids == [wake.pk]


def test_zero_delay_and_past_at_are_due_immediately(clock, sinks):
    calls = sinks(KIND)
    a = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    b = django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now() - timedelta(hours=3))  # within PAST_AT_LIMIT
    report = django_wakes.run_due()
    assert report.fired == 2
    assert sorted(calls.ids) == sorted([a.pk, b.pk])


def test_a_one_shot_never_fires_twice(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m")
    clock.advance("1m")
    assert django_wakes.run_due().fired == 1
    for _ in range(3):
        clock.advance("1d")
        report = django_wakes.run_due()
        assert report.fired == 0 and report.claimed == 0
        assert engine.claim_batch(runner_id="again") == []
        assert django_wakes.recover() == 0
    assert calls.ids == [wake.pk]
    assert django_wakes.cancel(wake.pk) is False
    assert row(wake).state == State.FIRED
    assert WakeAttempt.objects.filter(wake_id=wake.pk).count() == 1


def test_a_claimed_wake_is_not_claimed_again_while_its_lease_holds(clock, sinks):
    sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    first = engine.claim_batch(runner_id="A")
    assert [c.wake.pk for c in first] == [wake.pk]
    clock.advance("4m")  # default lease is 5m
    assert engine.claim_batch(runner_id="B") == []
    assert django_wakes.run_due(runner_id="B").claimed == 0
    held = row(wake)
    assert held.state == State.FIRING
    assert held.claimed_by == "A"
    assert held.lease_until == first[0].started_at + timedelta(minutes=5)


def test_fire_after_settle_cannot_settle_again(clock, sinks):
    calls = sinks(KIND)
    django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    (claim,) = engine.claim_batch(runner_id="A")
    assert engine.fire(claim).settled is True
    again = engine.fire(claim)  # a duplicated settle (e.g. a retried call) is fenced out
    assert again.settled is False
    assert WakeAttempt.objects.count() == 1
    assert len(calls) == 2  # the sink ran, but the row settled once
    assert row(claim.wake).state == State.FIRED


# --------------------------------------------------------------------------------------------------
# Claim: batches, limits, kinds
# --------------------------------------------------------------------------------------------------


def test_claim_takes_due_wakes_earliest_first_up_to_the_limit(clock, sinks):
    sinks(KIND)
    now = clock.now()
    late = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=1))
    early = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=3))
    middle = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=2))
    future = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now + timedelta(minutes=1))
    claims = engine.claim_batch(runner_id="A", limit=2)
    assert [c.wake.pk for c in claims] == [early.pk, middle.pk]
    for claim in claims:
        assert claim.wake.state == State.FIRING
        assert claim.wake.attempts == 1
        assert claim.runner_id == "A"
        assert claim.takeover is False and claim.expired is False
    assert [c.wake.pk for c in engine.claim_batch(runner_id="A", limit=5)] == [late.pk]
    assert row(future).state == State.PENDING
    assert {row(w).state for w in (early, middle, late)} == {State.FIRING}


def test_claim_persists_the_result_before_the_sink_runs(clock, sinks):
    seen = []
    sinks(KIND, then=lambda wake, result: seen.append(Wake.objects.get(pk=wake.pk).result))
    django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert seen == [{"trigger": "at"}]


def test_sink_receives_the_wake_with_its_intent(clock, sinks):
    calls = sinks(KIND)
    django_wakes.schedule(workspace_id=WS, session_id="s-9", kind=KIND, delay="0s", intent={"todo": ["a", "b"]})
    django_wakes.run_due()
    (wake,) = calls.wakes
    assert wake.intent == {"todo": ["a", "b"]}
    assert wake.session_id == "s-9"
    assert wake.workspace_id == WS
    assert wake.state == State.FIRING  # the sink sees the claimed row


def test_run_due_limit_and_batch_setting(clock, sinks, settings):
    calls = sinks(KIND)
    for _ in range(5):
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert django_wakes.run_due(limit=2).fired == 2
    settings.WAKES = {**settings.WAKES, "BATCH": 1}
    assert django_wakes.run_due().fired == 1
    assert django_wakes.run_due(limit=10).fired == 2
    assert len(calls) == 5
    assert len(set(calls.ids)) == 5


def test_only_wakes_of_registered_kinds_are_claimed(clock, sinks):
    sinks(KIND)
    sinks("test.other")
    mine = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    theirs = django_wakes.schedule(workspace_id=WS, kind="test.other", delay="0s")
    from django_wakes.sinks import registry

    registry.unregister("test.other")
    claims = engine.claim_batch(runner_id="A")
    assert [c.wake.pk for c in claims] == [mine.pk]
    assert row(theirs).state == State.PENDING


# --------------------------------------------------------------------------------------------------
# session_turn: the built-in kind
# --------------------------------------------------------------------------------------------------


def test_session_turn_hands_the_result_to_spawn_turn(clock, spawned):
    wake = django_wakes.schedule(workspace_id=WS, session_id="sess-42", delay="5m")
    assert wake.kind == "session_turn"
    clock.advance("5m")
    assert django_wakes.run_due().fired == 1
    assert spawned == [("sess-42", {"trigger": "at"})]
    assert row(wake).state == State.FIRED


def test_session_turn_kind_is_not_claimable_when_spawn_turn_is_removed(clock, spawned, settings):
    wake = django_wakes.schedule(workspace_id=WS, session_id="sess-1", delay="0s")
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": None}
    report = django_wakes.run_due()
    assert report.claimed == 0
    assert spawned == []
    assert row(wake).state == State.PENDING and row(wake).attempts == 0


# --------------------------------------------------------------------------------------------------
# Expiry: fire and expire never both
# --------------------------------------------------------------------------------------------------


def test_at_wake_whose_expiry_comes_first_expires_and_never_fires(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_in="10m")
    clock.advance(timedelta(minutes=10) - TICK)
    assert django_wakes.run_due().claimed == 0
    clock.advance(TICK)
    report = django_wakes.run_due()
    assert report.expired == 1 and report.fired == 0
    assert calls.results == [{"trigger": "at", "expired": True}]
    clock.advance("2h")  # past the original fire_at: nothing more
    report = django_wakes.run_due()
    assert report.claimed == 0
    assert calls.ids == [wake.pk]
    settled = row(wake)
    assert settled.state == State.EXPIRED
    assert list(WakeAttempt.objects.filter(wake_id=wake.pk).values_list("outcome", flat=True)) == [Outcome.EXPIRED]


def test_at_wake_due_before_its_expiry_fires_and_never_expires(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="10m", expires_in="1h")
    clock.advance("10m")
    assert django_wakes.run_due().fired == 1
    clock.advance("2h")
    assert django_wakes.run_due().claimed == 0
    assert calls.results == [{"trigger": "at"}]
    assert row(wake).state == State.FIRED


def test_fire_at_equal_to_expiry_is_an_expiry(clock, sinks):
    calls = sinks(KIND)
    moment = clock.now() + timedelta(minutes=5)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, at=moment, expires_at=moment)
    clock.set(moment)
    django_wakes.run_due()
    assert calls.results == [{"trigger": "at", "expired": True}]
    assert row(wake).state == State.EXPIRED


def test_a_runner_that_comes_late_delivers_the_expiry_not_the_fire(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="10m", expires_in="20m")
    clock.advance("30m")  # no runner ran between fire_at and expires_at
    report = django_wakes.run_due()
    assert report.expired == 1 and report.fired == 0
    assert calls.results == [{"trigger": "at", "expired": True}]
    assert row(wake).state == State.EXPIRED


def test_expiry_notice_whose_sink_fails_is_retried_as_an_expiry(clock, sinks, settings):
    settings.WAKES = {**settings.WAKES, "BACKOFF": {"BASE": "1m", "FACTOR": 1, "MAX": "1m"}}
    failures = []

    def flaky(wake, result):
        if not failures:
            failures.append(1)
            raise RuntimeError("sink down")

    calls = sinks(KIND, then=flaky)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_in="1m")
    clock.advance("1m")
    assert django_wakes.run_due().failed == 1
    assert row(wake).state == State.PENDING
    clock.advance("1m")
    report = django_wakes.run_due()
    assert report.expired == 1
    assert calls.results == [{"trigger": "at", "expired": True}] * 2
    assert row(wake).state == State.EXPIRED


# --------------------------------------------------------------------------------------------------
# Cancel
# --------------------------------------------------------------------------------------------------


def test_cancel_pending_wake_wins_once_and_it_never_fires(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m")
    assert django_wakes.cancel(wake.pk) is True
    assert django_wakes.cancel(wake.pk) is False
    clock.advance("1h")
    assert django_wakes.run_due().claimed == 0
    assert calls == []
    cancelled = row(wake)
    assert cancelled.state == State.CANCELLED
    assert cancelled.due_at is None
    assert cancelled.attempts == 0


def test_cancel_loses_to_a_claim(clock, sinks):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    (claim,) = engine.claim_batch(runner_id="A")
    assert django_wakes.cancel(wake.pk) is False
    assert engine.fire(claim).settled is True
    assert calls.ids == [wake.pk]
    assert row(wake).state == State.FIRED


def test_cancel_of_unknown_id_is_false(clock):
    assert django_wakes.cancel(987654321) is False


def test_cancel_a_watch_and_an_approval(clock, sinks):
    sinks(KIND)
    watch = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e")
    approval = django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="?", expires_in="1h")
    assert django_wakes.cancel(watch.pk) and django_wakes.cancel(approval.wake.pk)
    assert django_wakes.deliver_event(workspace_id=WS, event_key="e") == 0
    assert row(watch).state == State.CANCELLED and row(approval.wake).state == State.CANCELLED


# --------------------------------------------------------------------------------------------------
# RunReport
# --------------------------------------------------------------------------------------------------


def test_run_report_counts_and_next_at(clock, sinks):
    sinks(KIND)
    sinks("test.broken", then=RuntimeError("boom"))
    ok = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    bad = django_wakes.schedule(workspace_id=WS, kind="test.broken", delay="0s")
    later = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="2h")
    soon = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="30m")
    report = django_wakes.run_due()
    assert report.claimed == 2
    assert report.fired == 1
    assert report.failed == 1
    assert report.outcomes == {ok.pk: Outcome.FIRED, bad.pk: Outcome.FAILED}
    # the failed wake's backoff (10s by default) comes before the 30m wake
    assert report.next_at == row(bad).due_at == clock.now() + timedelta(seconds=10)
    assert row(later).state == row(soon).state == State.PENDING


def test_run_report_on_an_empty_database(clock, sinks):
    sinks(KIND)
    report = django_wakes.run_due()
    assert (report.fired, report.failed, report.claimed, report.next_at) == (0, 0, 0, None)


def test_next_at_includes_a_held_lease(clock, sinks):
    sinks(KIND)
    django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    (claim,) = engine.claim_batch(runner_id="A")
    report = django_wakes.run_due(runner_id="B")
    assert report.claimed == 0
    assert report.next_at == claim.wake.lease_until == clock.now() + timedelta(minutes=5)


def test_next_at_ignores_wakes_nobody_can_fire(clock, sinks):
    sinks(KIND)
    sinks("test.gone")
    django_wakes.schedule(workspace_id=WS, kind="test.gone", delay="1m")
    from django_wakes.sinks import registry

    registry.unregister("test.gone")
    assert django_wakes.run_due().next_at is None


def test_trigger_type_of_each_create(clock, sinks):
    sinks(KIND)
    assert row(django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m")).trigger_type == TriggerType.AT
    assert row(django_wakes.watch(workspace_id=WS, kind=KIND, event_key="k")).trigger_type == TriggerType.ON_EVENT
    approval = django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="?", expires_in="1m")
    assert row(approval.wake).trigger_type == TriggerType.ON_APPROVAL


def test_signals_are_sent_on_commit(clock, sinks, django_capture_on_commit_callbacks):
    from django_wakes import signals

    seen = []

    def created(sender, wake, **kwargs):
        seen.append(("created", wake.pk))

    def fired(sender, wake, outcome, **kwargs):
        seen.append(("fired", wake.pk, outcome))

    signals.wake_created.connect(created)
    signals.wake_fired.connect(fired)
    try:
        sinks(KIND)
        with django_capture_on_commit_callbacks(execute=True):
            wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
        assert seen == [("created", wake.pk)]
        with django_capture_on_commit_callbacks(execute=True):
            django_wakes.run_due()
        assert seen == [("created", wake.pk), ("fired", wake.pk, Outcome.FIRED)]
    finally:
        signals.wake_created.disconnect(created)
        signals.wake_fired.disconnect(fired)


# --------------------------------------------------------------------------------------------------
# Idempotency keys and coalescing
# --------------------------------------------------------------------------------------------------


def test_idempotency_key_returns_the_existing_wake_forever(clock, sinks):
    calls = sinks(KIND)
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", idempotency_key="job-1", intent={"v": 1})
    again = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="5h", idempotency_key="job-1", intent={"v": 2})
    assert again.pk == first.pk
    assert again.intent == {"v": 1} and again.fire_at == first.fire_at
    assert Wake.objects.count() == 1
    clock.advance("1m")
    django_wakes.run_due()
    # after it fired, a retried create still returns it and does not fire anything again
    clock.advance("30d")
    after = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", idempotency_key="job-1")
    assert after.pk == first.pk and after.state == State.FIRED
    assert django_wakes.run_due().claimed == 0
    assert calls.ids == [first.pk]
    assert Wake.objects.count() == 1


def test_idempotency_key_is_per_workspace(clock, sinks):
    sinks(KIND)
    a = django_wakes.schedule(workspace_id="ws-a", kind=KIND, delay="1m", idempotency_key="same")
    b = django_wakes.schedule(workspace_id="ws-b", kind=KIND, delay="1m", idempotency_key="same")
    assert a.pk != b.pk
    assert django_wakes.schedule(workspace_id="ws-b", kind=KIND, delay="1m", idempotency_key="same").pk == b.pk
    assert Wake.objects.count() == 2


def test_idempotency_key_holds_for_cancelled_and_dead_wakes(clock, sinks):
    sinks(KIND, then=RuntimeError("always"))
    cancelled = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", idempotency_key="c")
    django_wakes.cancel(cancelled.pk)
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", idempotency_key="c").pk == cancelled.pk
    dead = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", idempotency_key="d", max_attempts=1)
    django_wakes.run_due()
    assert row(dead).state == State.DEAD
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", idempotency_key="d").pk == dead.pk
    assert Wake.objects.count() == 2


def test_idempotent_replay_is_found_even_if_the_kind_differs(clock, sinks):
    sinks(KIND)
    sinks("test.engine.other")
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", idempotency_key="k")
    assert (
        django_wakes.watch(workspace_id=WS, kind="test.engine.other", event_key="e", idempotency_key="k").pk == first.pk
    )
    assert Wake.objects.count() == 1


def test_an_idempotency_key_never_returns_another_sessions_wake(clock, sinks):
    sinks(KIND)
    theirs = django_wakes.schedule(
        workspace_id=WS, session_id="s1", kind=KIND, delay="1m", idempotency_key="k", intent={"secret": 1}
    )
    for other in ("s2", None):
        with pytest.raises(IdempotencyConflict):
            django_wakes.schedule(workspace_id=WS, session_id=other, kind=KIND, delay="1m", idempotency_key="k")
        with pytest.raises(IdempotencyConflict):
            django_wakes.watch(workspace_id=WS, session_id=other, kind=KIND, event_key="e", idempotency_key="k")
        with pytest.raises(IdempotencyConflict):
            django_wakes.schedule_many(
                [{"delay": "1m", "idempotency_key": "k", "session_id": other}], workspace_id=WS, kind=KIND
            )
    host = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", idempotency_key="host")
    with pytest.raises(IdempotencyConflict):
        django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="1m", idempotency_key="host")
    assert Wake.objects.count() == 2
    again = django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="5m", idempotency_key="k")
    assert again.pk == theirs.pk and row(theirs).fire_at == theirs.fire_at
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", idempotency_key="host").pk == host.pk


def test_coalesce_returns_the_pending_holder_of_the_lane(clock, sinks):
    calls = sinks(KIND)
    holder = django_wakes.schedule(
        workspace_id=WS, kind=KIND, delay="1m", serial_key="L", coalesce=True, intent={"n": 1}
    )
    for n in range(2, 5):
        same = django_wakes.schedule(
            workspace_id=WS, kind=KIND, delay="10s", serial_key="L", coalesce=True, intent={"n": n}
        )
        assert same.pk == holder.pk
    assert Wake.objects.count() == 1
    assert row(holder).intent == {"n": 1}
    # other lanes and other kinds are not coalesced with it
    sinks("test.engine.other")
    other_lane = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", serial_key="M", coalesce=True)
    other_kind = django_wakes.schedule(
        workspace_id=WS, kind="test.engine.other", delay="1m", serial_key="L", coalesce=True
    )
    assert len({holder.pk, other_lane.pk, other_kind.pk}) == 3

    clock.advance("1m")
    django_wakes.run_due(limit=1)  # the holder fires: the lane has no pending holder any more
    assert calls.ids == [holder.pk]
    fresh = django_wakes.schedule(
        workspace_id=WS, kind=KIND, delay="1m", serial_key="L", coalesce=True, intent={"n": 5}
    )
    assert fresh.pk != holder.pk
    assert row(fresh).state == State.PENDING
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", serial_key="L", coalesce=True).pk == fresh.pk


def test_coalesce_while_the_holder_is_firing_creates_a_new_wake_that_waits_its_turn(clock, sinks):
    calls = sinks(KIND)
    holder = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="L", coalesce=True)
    (claim,) = engine.claim_batch(runner_id="A")
    follow = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="L", coalesce=True)
    assert follow.pk != holder.pk
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="L", coalesce=True).pk == follow.pk
    assert engine.claim_batch(runner_id="B") == []
    engine.fire(claim)
    django_wakes.run_due()
    assert calls.ids == [holder.pk, follow.pk]


def test_coalesce_after_the_holder_was_cancelled_creates_a_new_one(clock, sinks):
    sinks(KIND)
    holder = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", serial_key="L", coalesce=True)
    django_wakes.cancel(holder.pk)
    fresh = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", serial_key="L", coalesce=True)
    assert fresh.pk != holder.pk


def test_without_coalesce_a_lane_takes_many_wakes(clock, sinks):
    sinks(KIND)
    for _ in range(3):
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", serial_key="L")
    assert Wake.objects.filter(serial_key="L").count() == 3


# --------------------------------------------------------------------------------------------------
# CAS: a transition that lands between a runner's candidate read and its claim
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def between_read_and_claim(monkeypatch):
    """Run a callback after claim_batch has read its candidates but before it locks and claims them.

    Only the two-step claim (read, lock, update) has such a moment, so it is the one used here; the
    one-statement claim of PostgreSQL locks while it reads (tests/test_claim_plans.py).
    """
    from django_wakes.engine import claim
    from django_wakes.querysets import WakeQuerySet

    monkeypatch.setattr(claim, "ONE_STATEMENT_VENDORS", frozenset())

    original = WakeQuerySet.lock_pending
    hooks = []

    def lock_pending(self, ids, *args, **kwargs):
        ids = list(ids)
        while hooks:
            hooks.pop(0)(ids)
        return original(self, ids, *args, **kwargs)

    monkeypatch.setattr(WakeQuerySet, "lock_pending", lock_pending)
    return hooks.append


def test_cancel_between_read_and_claim_wins_and_the_claim_skips_the_wake(clock, sinks, between_read_and_claim):
    calls = sinks(KIND)
    victim = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    cancelled = []
    between_read_and_claim(lambda ids: cancelled.append((sorted(ids), django_wakes.cancel(victim.pk))))
    claims = engine.claim_batch(runner_id="A")
    assert cancelled == [(sorted([victim.pk, other.pk]), True)]
    assert [c.wake.pk for c in claims] == [other.pk]
    for claim in claims:
        engine.fire(claim)
    assert calls.ids == [other.pk]
    assert row(victim).state == State.CANCELLED and row(victim).attempts == 0


def test_an_accepted_event_is_never_overwritten_by_a_racing_expiry(clock, sinks, between_read_and_claim):
    """The runner read the watch as expired; the event was accepted (just before the expiry) before
    the runner locked it: the event wins, and the sink is never told it expired."""
    calls = sinks(KIND)
    expiry = clock.now() + timedelta(minutes=10)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_at=expiry)
    clock.set(expiry)
    accepted = []

    def deliver_just_in_time(ids):
        clock.set(expiry - TICK)  # the delivering process's clock: one tick before the expiry
        accepted.append(django_wakes.deliver_event(workspace_id=WS, event_key="e", payload="in time"))
        clock.set(expiry)

    between_read_and_claim(deliver_just_in_time)
    report = django_wakes.run_due()
    assert accepted == [1]
    assert report.fired == 1 and report.expired == 0
    assert calls.results == [{"trigger": "on_event", "event_key": "e", "payload": "in time"}]
    assert row(wake).state == State.FIRED


def test_an_accepted_answer_is_never_overwritten_by_a_racing_expiry(clock, sinks, between_read_and_claim):
    calls = sinks(KIND)
    request = django_wakes.request_approval(workspace_id="ws-demo", kind=KIND, prompt="?", expires_in="10m")
    expiry = clock.now() + timedelta(minutes=10)
    clock.set(expiry)

    def answer_just_in_time(ids):
        clock.set(expiry - TICK)
        django_wakes.resolve(request.token, "yes", "demo")
        clock.set(expiry)

    between_read_and_claim(answer_just_in_time)
    report = django_wakes.run_due()
    assert report.fired == 1 and report.expired == 0
    assert calls.results == [{"trigger": "on_approval", "answer": "yes", "resolved_by": "demo"}]


# --------------------------------------------------------------------------------------------------
# Creating costs one statement
# --------------------------------------------------------------------------------------------------


def _listen() -> tuple[Any, Any]:
    """A second PostgreSQL connection LISTENing for the push hints (autocommit, psycopg 3)."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    listener = psycopg.connect(**params, autocommit=True)
    listener.execute(f"LISTEN {notify.CHANNEL}")
    return listener, lambda: [n.payload for n in listener.notifies(timeout=0.5, stop_after=1)]


@pytest.mark.django_db(transaction=True)
def test_a_plain_schedule_is_one_statement_in_autocommit(sinks):
    """No BEGIN/COMMIT, no savepoint, no read: one INSERT (with its NOTIFY on PostgreSQL) per create."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    sinks(KIND)
    with CaptureQueriesContext(connection) as queries:
        wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert len(queries.captured_queries) == 1, [q["sql"][:80] for q in queries.captured_queries]
    assert row(wake).state == State.PENDING and wake.pk is not None and not wake._state.adding
    with CaptureQueriesContext(connection) as queries:  # due beyond the polling horizon: no NOTIFY either way
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h")
    assert len(queries.captured_queries) == 1


@pytest.mark.django_db(transaction=True)
def test_the_notify_of_a_plain_schedule_arrives_at_commit_and_never_for_a_rollback(sinks):
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY push hints exist only on PostgreSQL")
    sinks(KIND)
    listener, heard = _listen()
    try:
        wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
        assert heard() == [notify.payload(wake.due_at)]
        with pytest.raises(RuntimeError), transaction.atomic():
            django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
            raise RuntimeError("roll back")
        assert heard() == []
        assert Wake.objects.filter(workspace_id=WS).count() == 1
    finally:
        listener.close()
