"""Failures, retries, backoff, the dead letter, Retry/Defer, unregistered kinds, leases and fencing.

Leases are exercised with the fake clock in one process: runner "A" claims and stalls (we simply do
not call ``fire``), the clock passes the lease, runner "B" re-drives the wake. Real process kills are
covered by the multiprocess tests.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.engine import interrupts
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.sinks import Defer, Retry, registry
from tests.test_sink_exits import ctrl_c

pytestmark = pytest.mark.django_db

KIND = "test.failures"
WS = "ws-failures"
TICK = timedelta(microseconds=1)


def row(wake):
    return Wake.objects.get(pk=wake.pk)


def attempts_of(wake):
    return list(WakeAttempt.objects.filter(wake_id=wake.pk).order_by("number", "id"))


@pytest.fixture
def backoff(settings):
    settings.WAKES = {**settings.WAKES, "BACKOFF": {"BASE": "10s", "FACTOR": 3, "MAX": "5m"}}
    return [timedelta(seconds=s) for s in (10, 30, 90, 270, 300, 300)]


# --------------------------------------------------------------------------------------------------
# A raising sink: attempts, backoff, dead letter
# --------------------------------------------------------------------------------------------------


def test_raising_sink_records_the_attempt_and_error_and_retries_later(clock, sinks, backoff):
    calls = sinks(KIND, then=ValueError("upstream said 503"))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    report = django_wakes.run_due(runner_id="r1")
    assert report.failed == 1 and report.fired == 0
    assert report.outcomes == {wake.pk: Outcome.FAILED}
    failed = row(wake)
    assert failed.state == State.PENDING
    assert failed.attempts == 1
    assert "ValueError: upstream said 503" in failed.last_error
    assert failed.due_at == clock.now() + backoff[0]
    assert failed.lease_until is None and failed.lane_lock is None and failed.claim_token is None
    (attempt,) = attempts_of(wake)
    assert attempt.number == 1
    assert attempt.outcome == Outcome.FAILED
    assert attempt.runner_id == "r1"
    assert "upstream said 503" in attempt.error
    assert attempt.started_at == attempt.finished_at == clock.now()
    assert len(calls) == 1


def test_exponential_backoff_then_dead_with_the_last_error(clock, sinks, backoff):
    failures = iter(range(1, 100))

    def fail(wake, result):
        raise RuntimeError(f"failure #{next(failures)}")

    calls = sinks(KIND, then=fail)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=6)
    for number in range(1, 6):
        report = django_wakes.run_due()
        assert report.failed == 1, number
        current = row(wake)
        assert current.state == State.PENDING
        assert current.attempts == number
        delay = backoff[number - 1]
        assert current.due_at == clock.now() + delay
        # never early: one tick before the backoff ends nothing runs
        clock.advance(delay - TICK)
        assert django_wakes.run_due().claimed == 0
        clock.advance(TICK)
    report = django_wakes.run_due()
    assert report.dead == 1 and report.failed == 1
    assert report.outcomes == {wake.pk: "dead"}
    dead = row(wake)
    assert dead.state == State.DEAD
    assert dead.attempts == 6
    assert "RuntimeError: failure #6" in dead.last_error
    assert dead.lease_until is None and dead.claim_token is None
    assert [a.outcome for a in attempts_of(wake)] == [Outcome.FAILED] * 6
    assert [a.number for a in attempts_of(wake)] == [1, 2, 3, 4, 5, 6]
    clock.advance("1d")
    assert django_wakes.run_due().claimed == 0
    assert len(calls) == 6


def test_max_attempts_one_goes_dead_on_the_first_failure(clock, sinks):
    sinks(KIND, then=KeyError("missing"))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=1)
    django_wakes.run_due()
    assert row(wake).state == State.DEAD
    assert "KeyError" in row(wake).last_error


def test_one_failing_wake_does_not_stop_the_rest_of_the_pass(clock, sinks):
    good = sinks(KIND)
    sinks("test.failures.broken", then=ZeroDivisionError("nope"))
    now = clock.now()
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(seconds=3))
    broken = django_wakes.schedule(workspace_id=WS, kind="test.failures.broken", at=now - timedelta(seconds=2))
    last = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(seconds=1))
    report = django_wakes.run_due()
    assert report.claimed == 3
    assert report.fired == 2 and report.failed == 1
    assert good.ids == [first.pk, last.pk]
    assert row(broken).state == State.PENDING
    assert row(first).state == row(last).state == State.FIRED


def test_a_failure_after_success_clears_nothing_and_success_clears_last_error(clock, sinks, backoff):
    fail_first = []

    def flaky(wake, result):
        if not fail_first:
            fail_first.append(1)
            raise RuntimeError("transient")

    sinks(KIND, then=flaky)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert "transient" in row(wake).last_error
    clock.advance(backoff[0])
    assert django_wakes.run_due().fired == 1
    fired = row(wake)
    assert fired.state == State.FIRED and fired.last_error == "" and fired.attempts == 2
    assert [a.outcome for a in attempts_of(wake)] == [Outcome.FAILED, Outcome.FIRED]


def test_retried_fire_delivers_the_same_persisted_result(clock, sinks, backoff):
    calls = sinks(KIND, then=RuntimeError("x"))
    django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e")
    django_wakes.deliver_event(workspace_id=WS, event_key="e", payload={"n": 1})
    django_wakes.run_due()
    clock.advance(backoff[0])
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "event_key": "e", "payload": {"n": 1}}] * 2


# --------------------------------------------------------------------------------------------------
# Retry(at=, reason=) and Defer(until=)
# --------------------------------------------------------------------------------------------------


def test_retry_at_counts_an_attempt_and_refires_at_that_time(clock, sinks):
    retry_at = clock.now() + timedelta(minutes=7)
    answers = iter([Retry(at=retry_at, reason="rate limited"), None])
    calls = sinks(KIND, then=lambda wake, result: next(answers))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    report = django_wakes.run_due()
    assert report.failed == 1
    assert report.outcomes == {wake.pk: Outcome.RETRY}
    retrying = row(wake)
    assert retrying.state == State.PENDING
    assert retrying.attempts == 1
    assert retrying.due_at == retry_at
    assert retrying.last_error == "rate limited"
    clock.set(retry_at - TICK)
    assert django_wakes.run_due().claimed == 0
    clock.set(retry_at)
    assert django_wakes.run_due().fired == 1
    assert len(calls) == 2
    assert [a.outcome for a in attempts_of(wake)] == [Outcome.RETRY, Outcome.FIRED]
    assert attempts_of(wake)[0].error == "rate limited"


def test_retry_without_at_uses_backoff(clock, sinks, backoff):
    sinks(KIND, then=lambda wake, result: Retry(reason="later"))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert row(wake).due_at == clock.now() + backoff[0]


def test_retry_accepts_epoch_ms(clock, sinks):
    target = clock.now() + timedelta(minutes=1)
    sinks(KIND, then=lambda wake, result: Retry(at=int(target.timestamp() * 1000)))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert row(wake).due_at == target


def test_retry_still_respects_max_attempts(clock, sinks):
    sinks(KIND, then=lambda wake, result: Retry(at=clock.now(), reason="again"))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=3)
    for _ in range(5):
        django_wakes.run_due()
    dead = row(wake)
    assert dead.state == State.DEAD and dead.attempts == 3 and dead.last_error == "again"


def test_defer_is_not_an_attempt(clock, sinks):
    answers = iter([Defer(until="5m"), Defer(until=timedelta(minutes=5)), None])
    calls = sinks(KIND, then=lambda wake, result: next(answers))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=1)
    report = django_wakes.run_due()
    assert report.deferred == 1 and report.failed == 0 and report.fired == 0
    deferred = row(wake)
    assert deferred.state == State.PENDING
    assert deferred.attempts == 0
    assert deferred.due_at == clock.now() + timedelta(minutes=5)
    assert deferred.last_error == ""
    clock.advance(timedelta(minutes=5) - TICK)
    assert django_wakes.run_due().claimed == 0
    clock.advance(TICK)
    assert django_wakes.run_due().deferred == 1
    assert row(wake).attempts == 0
    clock.advance("5m")
    # max_attempts=1 and two defers behind it: defers did not use up the single attempt
    assert django_wakes.run_due().fired == 1
    fired = row(wake)
    assert fired.state == State.FIRED and fired.attempts == 1
    assert len(calls) == 3
    assert [a.outcome for a in attempts_of(wake)] == [Outcome.DEFERRED, Outcome.DEFERRED, Outcome.FIRED]


def test_defer_until_an_aware_datetime(clock, sinks):
    until = clock.now() + timedelta(hours=2)
    sinks(KIND, then=lambda wake, result: Defer(until=until))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert row(wake).due_at == until


@pytest.mark.parametrize(
    "bad",
    [
        Retry(at=datetime(2030, 1, 1, 12, 0)),  # naive
        Retry(at=float("nan")),
        Defer(until="whenever"),
        Defer(until=datetime(2030, 1, 1, 12, 0)),
        Defer(until=None),
        Defer(until="999999999d"),  # beyond the calendar
    ],
    ids=["retry-naive", "retry-nan", "defer-unparseable", "defer-naive", "defer-none", "defer-overflow"],
)
def test_a_malformed_outcome_is_a_failed_attempt_and_the_pass_goes_on(clock, sinks, backoff, bad):
    sinks("test.failures.malformed", then=lambda wake, result: bad)
    good = sinks(KIND)
    now = clock.now()
    broken = django_wakes.schedule(workspace_id=WS, kind="test.failures.malformed", at=now - timedelta(seconds=2))
    fine = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(seconds=1))
    report = django_wakes.run_due()
    assert report.claimed == 2 and report.fired == 1 and report.failed == 1
    assert good.ids == [fine.pk]
    failed = row(broken)
    assert failed.state == State.PENDING
    assert failed.attempts == 1
    assert failed.lease_until is None and failed.claim_token is None
    assert failed.due_at == clock.now() + backoff[0]
    assert type(bad).__name__ in failed.last_error
    (attempt,) = attempts_of(broken)
    assert attempt.outcome == Outcome.FAILED


def test_defer_frees_the_lane(clock, sinks):
    answers = iter([Defer(until="1h"), None, None])
    calls = sinks(KIND, then=lambda wake, result: next(answers))
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="1s")
    django_wakes.run_due()
    assert row(first).lane_lock is None
    clock.advance("1s")
    django_wakes.run_due()
    assert calls.ids == [first.pk, second.pk]


# --------------------------------------------------------------------------------------------------
# Unregistered kind at fire time
# --------------------------------------------------------------------------------------------------


def _messages(caplog, wake, level):
    return [
        r
        for r in caplog.records
        if r.name == "django_wakes" and r.levelno == level and f"wake {wake.pk} " in r.getMessage()
    ]


def test_unregistered_kind_stays_due_untouched_and_logs_warning_once_per_kind(clock, sinks, caplog):
    caplog.set_level(logging.DEBUG, logger="django_wakes")
    side_effects = sinks("test.failures.later")
    wake = django_wakes.schedule(workspace_id=WS, kind="test.failures.later", delay="1m", intent={"x": 1})
    registry.unregister("test.failures.later")
    sinks(KIND)  # some other kind is still fireable, so the runner is running passes
    clock.advance("1m")

    report = django_wakes.run_due()
    assert report.claimed == 0 and report.fired == 0 and report.failed == 0
    waiting = row(wake)
    assert waiting.state == State.PENDING
    assert waiting.attempts == 0
    assert waiting.result is None
    assert waiting.due_at == clock.now()
    assert attempts_of(wake) == []
    assert side_effects == []
    warnings = _messages(caplog, wake, logging.WARNING)
    assert len(warnings) == 1
    assert "test.failures.later" in warnings[0].getMessage()

    caplog.clear()
    for _ in range(3):
        clock.advance("1s")
        assert django_wakes.run_due().claimed == 0
        assert engine.claim_batch(runner_id="spin") == []
    assert _messages(caplog, wake, logging.WARNING) == []
    assert _messages(caplog, wake, logging.DEBUG) == [], "once per kind: not again at DEBUG every pass"
    assert row(wake).attempts == 0 and row(wake).state == State.PENDING

    # registering the sink makes the next pass fire it
    late = sinks("test.failures.later")
    report = django_wakes.run_due()
    assert report.fired == 1
    assert late.ids == [wake.pk]
    assert late.results == [{"trigger": "at"}]
    fired = row(wake)
    assert fired.state == State.FIRED and fired.attempts == 1


def test_unregistered_kind_is_logged_even_when_no_kind_is_registered(clock, sinks, caplog, settings):
    caplog.set_level(logging.DEBUG, logger="django_wakes")
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": None}
    sinks("test.failures.lonely")
    wake = django_wakes.schedule(workspace_id=WS, kind="test.failures.lonely", delay="0s")
    registry.reset()
    assert django_wakes.run_due().claimed == 0
    assert len(_messages(caplog, wake, logging.WARNING)) == 1
    assert row(wake).state == State.PENDING


def test_lapsed_firing_wake_of_an_unregistered_kind_is_left_alone_and_logged(clock, sinks, caplog):
    caplog.set_level(logging.DEBUG, logger="django_wakes")
    sinks("test.failures.vanished")
    sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind="test.failures.vanished", delay="0s")
    (claim,) = engine.claim_batch(runner_id="crashed")
    registry.unregister("test.failures.vanished")  # the runner died, and the new deploy lacks the sink
    clock.advance("1h")  # far past the lease

    assert django_wakes.run_due().claimed == 0
    left = row(wake)
    assert left.state == State.FIRING and left.claim_token == claim.token and left.attempts == 1
    assert attempts_of(wake) == []
    assert len(_messages(caplog, wake, logging.WARNING)) == 1


def test_cancel_refuses_a_non_integer_id():
    with pytest.raises(django_wakes.InvalidWake):
        django_wakes.cancel("abc")


def test_unregistered_kind_does_not_block_other_wakes(clock, sinks):
    sinks("test.failures.gone")
    for _ in range(5):
        django_wakes.schedule(workspace_id=WS, kind="test.failures.gone", delay="0s")
    registry.unregister("test.failures.gone")
    calls = sinks(KIND)
    clock.advance("1s")
    ok = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    report = django_wakes.run_due(limit=2)
    assert report.fired == 1
    assert calls.ids == [ok.pk]


def test_sink_unregistered_between_claim_and_fire_puts_the_wake_back_uncounted(clock, sinks):
    sinks("test.failures.flaky")
    wake = django_wakes.schedule(workspace_id=WS, kind="test.failures.flaky", delay="0s")
    (claim,) = engine.claim_batch(runner_id="A")
    assert row(wake).attempts == 1
    registry.unregister("test.failures.flaky")
    outcome = engine.fire(claim)
    assert outcome.outcome == "unwakeable"
    back = row(wake)
    assert back.state == State.PENDING
    assert back.attempts == 0
    assert back.lane_lock is None and back.lease_until is None and back.claim_token is None
    assert attempts_of(wake) == []


# --------------------------------------------------------------------------------------------------
# Leases and fencing
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def lease(settings):
    settings.WAKES = {**settings.WAKES, "LEASE": "30s"}
    return timedelta(seconds=30)


def test_lapsed_lease_is_redriven_with_the_persisted_result_and_late_finisher_is_fenced(clock, sinks, lease):
    calls = sinks(KIND)
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", serial_key="L")
    django_wakes.deliver_event(workspace_id=WS, event_key="e", payload={"persisted": True})
    expected = {"trigger": "on_event", "event_key": "e", "payload": {"persisted": True}}

    (claim_a,) = engine.claim_batch(runner_id="A")
    assert claim_a.wake.pk == wake.pk
    assert row(wake).lease_until == clock.now() + lease

    clock.advance(lease - TICK)
    assert django_wakes.run_due(runner_id="B").claimed == 0  # the lease still holds
    clock.advance(TICK)
    report = django_wakes.run_due(runner_id="B")
    assert report.claimed == 1 and report.fired == 1
    assert calls.results == [expected]
    settled = row(wake)
    assert settled.state == State.FIRED
    assert settled.claimed_by == "B"
    # A's sink was never known to start (the wake was not guarded yet): that attempt is not charged
    assert settled.attempts == 1
    assert settled.guarded is True
    assert settled.lane_lock is None
    history = attempts_of(wake)
    assert [(a.number, a.runner_id, a.outcome) for a in history] == [
        (1, "A", Outcome.ABANDONED),
        (1, "B", Outcome.FIRED),
    ]
    assert "lease lapsed" in history[0].error and "not charged" in history[0].error

    # runner A wakes up from its stall and finishes: its outcome must not overwrite B's
    settled_at = settled.settled_at
    late = engine.fire(claim_a)
    assert late.settled is False
    assert late.outcome == "fenced"
    after = row(wake)
    assert after.state == State.FIRED
    assert after.claimed_by == "B"
    assert after.settled_at == settled_at
    assert after.attempts == 1
    assert len(attempts_of(wake)) == 2
    assert calls.results == [expected, expected]  # A's sink ran (at-least-once), its settle did not


def test_late_finisher_that_failed_cannot_reschedule_a_taken_over_wake(clock, sinks, lease):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    (claim_a,) = engine.claim_batch(runner_id="A")
    clock.advance(lease)
    (claim_b,) = engine.claim_batch(runner_id="B")
    assert claim_b.takeover and claim_b.wake.pk == wake.pk
    assert claim_b.result == {"trigger": "at"}
    # A's late failure and late Defer are both fenced while B holds the lease
    registry.register(KIND, lambda w, r: (_ for _ in ()).throw(RuntimeError("late")), replace=True)
    assert engine.fire(claim_a).settled is False
    registry.register(KIND, lambda w, r: Defer(until="1h"), replace=True)
    assert engine.fire(claim_a).settled is False
    held = row(wake)
    assert held.state == State.FIRING and held.claimed_by == "B" and held.last_error == ""
    calls = sinks(KIND)
    assert engine.fire(claim_b).settled is True
    assert row(wake).state == State.FIRED
    assert calls.ids == [wake.pk]


def test_recover_redrives_every_lapsed_lease(clock, sinks, lease):
    calls = sinks(KIND)
    wakes = [django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s") for _ in range(3)]
    assert len(engine.claim_batch(runner_id="crashed")) == 3
    assert django_wakes.recover(runner_id="boot") == 0  # leases still live
    clock.advance(lease)
    assert django_wakes.recover(runner_id="boot") == 3
    assert sorted(calls.ids) == sorted(w.pk for w in wakes)
    for wake in wakes:
        assert row(wake).state == State.FIRED
        assert [a.outcome for a in attempts_of(wake)] == [Outcome.ABANDONED, Outcome.FIRED]


def test_a_wake_whose_sink_kills_its_runner_goes_dead_after_its_own_attempts(clock, sinks, lease):
    """The first death is not charged (unknown whether the sink started); from then on starts are recorded.

    The process "dies" mid-sink by a real Ctrl-C: nothing in the engine catches what a signal raised.
    """
    calls = sinks(KIND, then=ctrl_c)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=2)
    for runner in ("A", "B", "C"):
        (claim,) = engine.claim_batch(runner_id=runner)
        with interrupts.noting_signals(), pytest.raises(KeyboardInterrupt):
            engine.run_sink(claim)
        clock.advance(lease)
    assert engine.claim_batch(runner_id="D") == []
    dead = row(wake)
    assert dead.state == State.DEAD and dead.guarded
    assert "interrupted" in dead.last_error
    assert dead.lane_lock is None and dead.lease_until is None
    assert [(a.number, a.runner_id, a.outcome) for a in attempts_of(wake)] == [
        (1, "A", Outcome.ABANDONED),
        (1, "B", Outcome.INTERRUPTED),
        (2, "C", Outcome.INTERRUPTED),
    ]
    assert len(calls) == 3


def test_claims_whose_sinks_never_started_are_never_charged(clock, sinks, lease):
    """Batch-mates of a poisoned wake: a guarded claim that lapses unstarted is abandoned, not charged."""
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=1)
    for runner in ("A", "B", "C", "D"):
        (claim,) = engine.claim_batch(runner_id=runner)
        assert claim.wake.attempts == 1
        clock.advance(lease)  # the runner dies before starting this sink
    assert row(wake).state == State.FIRING
    assert {a.outcome for a in attempts_of(wake)} == {Outcome.ABANDONED}
    assert django_wakes.run_due(runner_id="E").fired == 1
    assert row(wake).state == State.FIRED and row(wake).attempts == 1
    assert len(calls) == 1


def test_each_claim_gets_a_larger_fencing_token_across_wakes_of_a_lane(clock, sinks, lease):
    seen: list[tuple[int, int]] = []
    sinks(KIND, then=lambda wake, result: seen.append((wake.pk, wake.fence)))
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    (stale,) = engine.claim_batch(runner_id="A")
    clock.advance(lease)  # A stalls; B takes the first wake over with a larger token
    django_wakes.run_due(runner_id="B")
    django_wakes.run_due(runner_id="B")
    assert [pk for pk, _ in seen] == [first.pk, second.pk]
    assert stale.wake.fence < seen[0][1] < seen[1][1]
    assert row(first).fence == seen[0][1] and row(second).fence == seen[1][1]


def test_a_lapsed_lane_holder_keeps_its_lane_until_redriven(clock, sinks, lease):
    calls = sinks(KIND)
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    engine.claim_batch(runner_id="A")
    clock.advance(lease)
    django_wakes.run_due(runner_id="B")
    django_wakes.run_due(runner_id="B")
    assert calls.ids == [first.pk, second.pk]


def test_a_takeover_of_an_expiry_delivers_the_expiry(clock, sinks, lease):
    calls = sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_in="1m")
    clock.advance("1m")
    (claim_a,) = engine.claim_batch(runner_id="A")
    assert claim_a.expired
    clock.advance(lease)
    report = django_wakes.run_due(runner_id="B")
    assert report.expired == 1
    assert calls.results == [{"trigger": "at", "expired": True}]
    assert row(wake).state == State.EXPIRED


def test_a_sink_outliving_its_lease_is_fenced_in_the_run_report(clock, sinks, lease):
    """The lease lapses while the sink runs and runner B takes the wake over: A's pass reports it fenced."""
    taken_over = []

    def slow(wake, result):
        if not taken_over:
            clock.advance(lease)  # the sink stalls past its lease...
            taken_over.extend(engine.claim_batch(runner_id="B"))  # ...and another runner re-drives it

    calls = sinks(KIND, then=slow)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    report = django_wakes.run_due(runner_id="A")
    assert report.claimed == 1
    assert report.fenced == 1 and report.fired == 0 and report.failed == 0
    assert report.outcomes == {wake.pk: "fenced"}
    assert [c.wake.pk for c in taken_over] == [wake.pk]
    held = row(wake)
    assert held.state == State.FIRING and held.claimed_by == "B"
    assert engine.fire(taken_over[0]).settled is True
    assert row(wake).state == State.FIRED
    assert [(a.runner_id, a.outcome) for a in attempts_of(wake)] == [("A", Outcome.ABANDONED), ("B", Outcome.FIRED)]
    assert len(calls) == 2


def test_a_batch_of_successes_settles_together_and_fences_a_taken_over_wake(clock, sinks):
    """settle_successes() writes a batch in one go, but a wake another runner took over stays theirs."""
    calls = sinks(KIND)
    first, taken, third = (django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s") for _ in range(3))
    expiring = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="never", expires_in="1s")
    clock.advance("1s")
    claims = engine.claim_batch(runner_id="A")
    assert sorted(c.wake.pk for c in claims) == sorted([first.pk, taken.pk, third.pk, expiring.pk])
    done = [engine.run_sink(c) for c in claims]
    assert all(isinstance(d, engine.Succeeded) for d in done)

    clock.advance("1h")  # A stalls past its lease before settling; B re-drives `taken` only
    (takeover,) = engine.claim_batch(runner_id="B", limit=1)
    assert takeover.takeover
    assert engine.fire(takeover).settled

    outcomes = {d.claim.wake.pk: o.outcome for d, o in zip(done, engine.settle_successes(done), strict=True)}
    victim = takeover.wake.pk
    assert outcomes.pop(victim) == "fenced"
    assert set(outcomes.values()) <= {Outcome.FIRED, Outcome.EXPIRED}
    assert outcomes[expiring.pk] == Outcome.EXPIRED and row(expiring).state == State.EXPIRED
    for pk in outcomes:
        assert Wake.objects.get(pk=pk).state in (State.FIRED, State.EXPIRED)
        assert [(a.number, a.runner_id, a.outcome) for a in WakeAttempt.objects.filter(wake_id=pk)] == [
            (1, "A", outcomes[pk])
        ]
    assert [(a.runner_id, a.outcome) for a in WakeAttempt.objects.filter(wake_id=victim)] == [
        ("A", Outcome.ABANDONED),
        ("B", Outcome.FIRED),
    ]
    assert row(Wake.objects.get(pk=victim)).claimed_by == "B"
    assert len(calls) == 5  # four sinks by A, the re-drive by B


def test_on_postgresql_a_batch_of_plain_successes_settles_in_one_statement(clock, sinks):
    """The fenced UPDATE and the attempts' INSERT travel together: one round trip per settled batch."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "postgresql":
        pytest.skip("the one-statement settle is PostgreSQL's (a data-modifying CTE)")
    sinks(KIND)
    for _ in range(3):
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    done = [engine.run_sink(c) for c in engine.claim_batch(runner_id="A")]
    with CaptureQueriesContext(connection) as queries:
        outcomes = engine.settle_successes(done)
    assert [o.outcome for o in outcomes] == [Outcome.FIRED] * 3
    assert len(queries.captured_queries) == 1, [q["sql"][:60] for q in queries.captured_queries]
    assert WakeAttempt.objects.filter(wake__workspace_id=WS, outcome=Outcome.FIRED, runner_id="A").count() == 3
