"""The runner's own defences, in this process: stale claims are not started, lost claims are not
started, a stop hands back unstarted claims while a sink hangs, and database errors do not end it.

The same properties against real servers that the suite restarts, partitions and makes read-only
are in ``tests/test_faults.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connections

from django_wakes import engine, schedule
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.runner import SAFE_LEASE_FRACTION, Sweeper, apply_client_timeouts
from django_wakes.sinks import registry
from tests.processes import wait_for
from tests.test_runner import WAIT, Looping, blocking_sink, loop  # noqa: F401  (loop is a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-resilience"


def due_now(kind: str, **kwargs: Any) -> Wake:
    return schedule(workspace_id=WS, delay="0s", kind=kind, **kwargs)


def test_a_claim_whose_lease_is_no_longer_known_good_is_handed_back_uncharged(sinks):
    """A runner that stalled past half its lease starts none of the claims it made before the stall."""
    calls = sinks("t.stale")
    wakes = [due_now("t.stale") for _ in range(3)]
    runner = Sweeper(lease=timedelta(seconds=2), listen=False)
    claims = runner._claim(10)
    assert len(claims) == 3
    with runner._in_hand_lock:  # the stall: the last confirmation is now older than the safe fraction
        for wake_id in runner._confirmed:
            runner._confirmed[wake_id] -= 2 * SAFE_LEASE_FRACTION + 0.01
    report = engine.fire_claims(claims, may_start=runner.may_start, on_settled=runner._settled)
    assert report.released == 3 and report.fired == 0
    assert calls == []
    for wake in wakes:
        row = Wake.objects.get(pk=wake.pk)
        assert row.state == State.PENDING and row.attempts == 0 and row.lane_lock is None
    assert not WakeAttempt.objects.exists()
    assert runner._in_hand == {}


def test_a_claim_the_heartbeat_finds_taken_over_is_not_started(sinks, settings):
    calls = sinks("t.lost")
    wake = due_now("t.lost")
    runner = Sweeper(lease=timedelta(seconds=30), listen=False)
    (claim,) = runner._claim(10)
    # Another runner takes the wake over (its token changes) while this one still holds the claim.
    Wake.objects.filter(pk=wake.pk).update(claim_token="someone-else-took-it")
    assert runner.heartbeat() == 0
    assert runner.may_start(claim) is False
    assert calls == []


def test_the_heartbeat_confirms_the_leases_it_renews(sinks):
    sinks("t.renewed")
    due_now("t.renewed")
    runner = Sweeper(lease=timedelta(seconds=2), listen=False)
    (claim,) = runner._claim(10)
    with runner._in_hand_lock:
        runner._confirmed[claim.wake.pk] -= 5  # long ago...
    assert runner.heartbeat() == 1  # ...until the heartbeat renews it under the claim's token
    assert runner.may_start(claim) is True


def test_stop_hands_back_unstarted_claims_at_once_while_a_sink_hangs(loop, sinks):  # noqa: F811
    entered, release, ids = blocking_sink("t.hang")
    hanging = due_now("t.hang")
    waiting = [due_now("t.hang") for _ in range(4)]
    runner = Sweeper(interval=30.0, lease=timedelta(seconds=30), listen=False, batch=10)
    looping = loop(runner, release=release)
    assert entered.wait(WAIT)
    runner.stop()
    wait_for(
        lambda: Wake.objects.filter(pk__in=[w.pk for w in waiting], state=State.PENDING).count() == 4,
        timeout=WAIT,
        what="the unstarted claims to be handed back while the sink still hangs",
    )
    assert Wake.objects.get(pk=hanging.pk).state == State.FIRING
    for wake in waiting:
        row = Wake.objects.get(pk=wake.pk)
        assert row.attempts == 0 and row.claimed_by == runner.runner_id and row.lane_lock is None
    release.set()
    looping.join()
    assert ids == [hanging.pk]
    assert Wake.objects.get(pk=hanging.pk).state == State.FIRED
    assert not WakeAttempt.objects.filter(wake_id__in=[w.pk for w in waiting]).exists()


def test_the_loop_outlives_database_errors_and_logs_each_outage_once(loop, sinks, monkeypatch, caplog):  # noqa: F811
    calls = sinks("t.outage")
    real_claim = engine.claim_batch
    failures = {"left": 6}

    def flaky_claim(**kwargs: Any) -> list[engine.Claim]:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return real_claim(**kwargs)

    monkeypatch.setattr(engine, "claim_batch", flaky_claim)
    wake = due_now("t.outage")
    runner = Sweeper(interval=0.05, lease=timedelta(seconds=30), listen=False)
    with caplog.at_level(logging.INFO, logger="django_wakes"):
        looping = loop(runner)
        wait_for(lambda: Wake.objects.filter(pk=wake.pk, state=State.FIRED).exists(), timeout=WAIT, what="the fire")
        runner.stop()
        looping.join()
    assert [c[0] for c in calls] == [wake.pk]
    unavailable = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    back = [r for r in caplog.records if "database reachable again" in r.getMessage()]
    assert len(unavailable) == 1 and len(back) == 1
    assert "6 failed tries" in back[0].getMessage()


def test_registration_waits_for_the_database(loop, sinks, monkeypatch):  # noqa: F811
    from django_wakes.engine import runners

    real_register = runners.register
    failures = {"left": 3}

    def flaky_register(runner_id: str, kinds: list[str] | None = None) -> None:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise OperationalError("the database system is starting up")
        real_register(runner_id, kinds)

    monkeypatch.setattr(runners, "register", flaky_register)
    calls = sinks("t.boot")
    wake = due_now("t.boot")
    runner = Sweeper(interval=0.05, lease=timedelta(seconds=30), listen=False)
    looping = loop(runner)
    wait_for(lambda: Wake.objects.filter(pk=wake.pk, state=State.FIRED).exists(), timeout=WAIT, what="the fire")
    looping.stop()
    assert failures["left"] == 0 and len(calls) == 1


def test_a_settle_is_retried_until_the_database_takes_it(sinks, monkeypatch):
    """The sink ran: dropping its settle would re-drive it later (a second effect), so it is retried."""
    calls = sinks("t.settle")
    wake = due_now("t.settle")
    from django_wakes.engine import settle

    real = settle._settle_successes
    failures = {"left": 8}  # more than the bounded retries of run_due and friends

    def flaky(done: Any) -> Any:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise OperationalError("terminating connection due to administrator command")
        return real(done)

    monkeypatch.setattr(settle, "_settle_successes", flaky)
    monkeypatch.setattr("django_wakes.engine.shared.BACKOFF_CAP", 0.01)
    runner = Sweeper(lease=timedelta(seconds=30), listen=False)
    report = runner.run_once()
    assert report.fired == 1 and failures["left"] == 0
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED and len(calls) == 1


def test_the_batch_is_planned_from_sink_durations():
    runner = Sweeper(lease=timedelta(seconds=10), batch=100, listen=False)
    assert runner.planned_batch() == 100  # nothing measured yet
    runner._sink_seconds = 1.0  # 1 s sinks, 5 s of safe lease: at most 5 can start in time
    assert runner.planned_batch() == 5
    runner.concurrency = 4
    assert runner.planned_batch() == 20
    runner._sink_seconds = 60.0
    assert runner.planned_batch() == 1


def test_client_timeouts_are_set_where_the_project_set_none(settings):
    alias = engine.db_alias()
    config = connections.settings[alias]
    before = dict(config.get("OPTIONS", {}))
    ours = {"connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"}
    ours |= {"tcp_user_timeout", "read_timeout", "write_timeout"}
    try:
        config["OPTIONS"] = {k: v for k, v in before.items() if k not in ours}
        apply_client_timeouts(timedelta(seconds=20))
        options = config["OPTIONS"]
        vendor = connections[alias].vendor
        if vendor == "postgresql":
            assert options["tcp_user_timeout"] == 20_000 and options["keepalives"] == 1
            config["OPTIONS"]["tcp_user_timeout"] = 1234
            apply_client_timeouts(timedelta(seconds=20))
            assert options["tcp_user_timeout"] == 1234  # what the project set wins
            assert options["connect_timeout"] == 10
        elif vendor == "mysql":
            assert options["read_timeout"] == 20 and options["write_timeout"] == 20
        else:
            assert not ours & set(options)  # SQLite: a file, nothing to time out
        assert Wake.objects.count() >= 0  # the connection reopens with them
    finally:
        config["OPTIONS"] = before
        connections[alias].close()


def test_an_unregistered_sink_after_claim_is_released_not_charged(sinks):
    sinks("t.vanish")
    wake = due_now("t.vanish")
    runner = Sweeper(lease=timedelta(seconds=30), listen=False)
    claims = runner._claim(10)
    registry.unregister("t.vanish")
    report = engine.fire_claims(claims, may_start=runner.may_start, on_settled=runner._settled)
    assert report.outcomes == {wake.pk: "unwakeable"}
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.PENDING and row.attempts == 0


def test_a_guarded_wake_records_its_sink_start(sinks, settings):
    seen: list[Any] = []
    sinks("t.guarded", then=lambda wake, result: seen.append(Wake.objects.get(pk=wake.pk).sink_started_at))
    wake = due_now("t.guarded")
    Wake.objects.filter(pk=wake.pk).update(guarded=True)
    started = time.time()
    Sweeper(lease=timedelta(seconds=30), listen=False).run_once()
    assert seen and seen[0] is not None and seen[0].timestamp() >= started - 1
    attempt = WakeAttempt.objects.get(wake_id=wake.pk)
    assert attempt.outcome == Outcome.FIRED and attempt.fence == Wake.objects.get(pk=wake.pk).fence > 0


def test_no_sink_runs_while_the_heartbeat_and_stop_race(sinks):
    """may_start and the shutdown hand-back share one lock: a claim is either started or handed back."""
    started: list[int] = []
    sinks("t.race", then=lambda wake, result: started.append(wake.pk))
    wakes = [due_now("t.race") for _ in range(20)]
    runner = Sweeper(lease=timedelta(seconds=30), listen=False, batch=20)
    claims = runner._claim(20)
    stopper = threading.Timer(0.001, lambda: (runner.stop(), runner.hand_back_unstarted()))
    stopper.start()
    engine.fire_claims(claims, may_start=runner.may_start, on_settled=runner._settled)
    stopper.join()
    for wake in wakes:
        row = Wake.objects.get(pk=wake.pk)
        if wake.pk in started:
            assert row.state == State.FIRED
        else:
            assert row.state == State.PENDING and row.attempts == 0


def test_a_later_claims_error_does_not_drop_the_outcomes_of_sinks_that_ran(sinks, monkeypatch):
    """The first sink returned: its success must be settled even though the next claim blew up."""
    calls = sinks("t.flush")
    first, second = due_now("t.flush"), due_now("t.flush")
    from django_wakes.engine import settle

    real = settle.prepare_sink

    def broken_for_second(claim: Any, **kwargs: Any) -> Any:
        if claim.wake.pk == second.pk:
            raise OperationalError("connection lost before the second sink")
        return real(claim, **kwargs)

    monkeypatch.setattr(settle, "prepare_sink", broken_for_second)
    runner = Sweeper(lease=timedelta(seconds=30), listen=False, settle_window=60.0)
    with pytest.raises(OperationalError):
        runner.run_once()
    assert [pk for pk, _ in calls] == [first.pk]
    assert Wake.objects.get(pk=first.pk).state == State.FIRED  # settled, not left to be fired again
    # the second's sink never ran; the runner stops renewing it, so its lease lapses and the takeover
    # finds it unguarded: abandoned, not charged
    assert Wake.objects.get(pk=second.pk).state == State.FIRING
    assert second.pk not in runner._in_hand


def test_settling_an_older_claim_keeps_the_newer_claim_of_the_same_wake_in_hand(sinks):
    sinks("t.reclaim")
    wake = due_now("t.reclaim")
    runner = Sweeper(lease=timedelta(seconds=30), listen=False)
    (old,) = runner._claim(10)
    Wake.objects.filter(pk=wake.pk).update(lease_until=Wake.objects.get(pk=wake.pk).claimed_at)  # lapsed
    (new,) = runner._claim(10)  # this runner takes its own lapsed claim over
    assert new.takeover and new.token != old.token
    runner._settled(old, engine.FireOutcome("fenced", settled=False))  # type: ignore[arg-type]
    assert runner._in_hand[wake.pk] is new and runner.may_start(new) is True


def test_a_failing_session_busy_hook_is_a_failed_attempt(settings, spawned):
    def broken(session_id: str) -> bool:
        raise RuntimeError("busy-check service down")

    settings.WAKES = {**settings.WAKES, "SESSION_BUSY": broken}
    wake = schedule(workspace_id=WS, session_id="s-busy", delay="0s")
    report = Sweeper(lease=timedelta(seconds=30), listen=False).run_once()
    assert report.failed == 1 and spawned == []
    row = Wake.objects.get(pk=wake.pk)
    assert row.attempts == 1 and "busy-check service down" in row.last_error
