"""Lanes (``serial_key``): single-file firing, earliest first, for every trigger type (one process).

The multi-process proof that the database enforces this lives in the multiprocess tests; here the
rules are pinned down deterministically by holding claims with ``engine.claim_batch``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction

import django_wakes
from django_wakes import engine
from django_wakes.models import State, Wake

pytestmark = pytest.mark.django_db

KIND = "test.lanes"
WS = "ws-lanes"


def row(wake):
    return Wake.objects.get(pk=wake.pk)


def test_a_batch_takes_at_most_one_per_lane_earliest_first(clock, sinks):
    sinks(KIND)
    now = clock.now()
    # created out of time order so that id order and due order disagree
    a3 = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="A", at=now - timedelta(minutes=1))
    a1 = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="A", at=now - timedelta(minutes=3))
    a2 = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="A", at=now - timedelta(minutes=2))
    b2 = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="B", at=now - timedelta(seconds=5))
    b1 = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="B", at=now - timedelta(seconds=10))
    free1 = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=1))
    free2 = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=1))

    claims = engine.claim_batch(runner_id="A", limit=100)
    assert sorted(c.wake.pk for c in claims) == sorted([a1.pk, b1.pk, free1.pk, free2.pk])
    lanes = [c.wake.serial_key for c in claims if c.wake.serial_key]
    assert sorted(lanes) == ["A", "B"]
    for claim in claims:
        assert row(claim.wake).lane_lock == claim.wake.serial_key
    assert {row(w).state for w in (a2, a3, b2)} == {State.PENDING}


def test_equal_due_times_go_in_id_order(clock, sinks):
    calls = sinks(KIND)
    at = clock.now()
    wakes = [django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", at=at) for _ in range(4)]
    for _ in range(4):
        assert django_wakes.run_due().fired == 1
    assert calls.ids == [w.pk for w in wakes]


def test_a_lane_is_never_claimed_while_it_has_a_firing_wake(clock, sinks):
    calls = sinks(KIND)
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="1s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="M", delay="1s")
    (held,) = engine.claim_batch(runner_id="A")
    assert held.wake.pk == first.pk
    clock.advance("1s")

    # both due now; the lane L is busy: only M goes
    assert [c.wake.pk for c in engine.claim_batch(runner_id="B")] == [other.pk]
    report = django_wakes.run_due(runner_id="C")
    assert report.claimed == 0
    clock.advance("4m")  # still inside A's lease
    assert engine.claim_batch(runner_id="B") == []
    assert row(second).state == State.PENDING

    assert engine.fire(held).settled
    assert row(first).lane_lock is None
    report = django_wakes.run_due(runner_id="C")
    assert report.fired == 1
    assert calls.ids == [first.pk, second.pk]


def test_a_failed_wake_retries_before_a_later_wake_of_its_lane(clock, sinks, settings):
    settings.WAKES = {**settings.WAKES, "BACKOFF": {"BASE": "1m", "FACTOR": 1, "MAX": "1m"}}
    failed_once = []

    def fail_first(wake, result):
        if not failed_once:
            failed_once.append(wake.pk)
            raise RuntimeError("first attempt fails")

    calls = sinks(KIND, then=fail_first)
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="2m")
    django_wakes.run_due()
    assert row(first).due_at == clock.now() + timedelta(minutes=1)
    clock.advance("2m")
    django_wakes.run_due()
    django_wakes.run_due()
    assert calls.ids == [first.pk, first.pk, second.pk]


def test_lanes_are_per_serial_key_across_workspaces_and_kinds(clock, sinks):
    """A lane is a serial_key: wakes of other kinds and workspaces on the same key still queue."""
    sinks(KIND)
    sinks("test.lanes.other")
    a = django_wakes.schedule(workspace_id="w1", kind=KIND, serial_key="shared", delay="0s")
    b = django_wakes.schedule(workspace_id="w2", kind="test.lanes.other", serial_key="shared", delay="0s")
    claims = engine.claim_batch(runner_id="A")
    assert [c.wake.pk for c in claims] == [a.pk]
    assert engine.claim_batch(runner_id="B") == []
    engine.fire(claims[0])
    assert [c.wake.pk for c in engine.claim_batch(runner_id="B")] == [b.pk]


def test_the_database_refuses_a_second_firing_wake_in_a_lane(clock, sinks):
    """The invariant is a unique index, not just the claim query: bypassing the engine still fails."""
    sinks(KIND)
    django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    engine.claim_batch(runner_id="A")
    with pytest.raises(IntegrityError), transaction.atomic():
        Wake.objects.filter(pk=second.pk).update(state=State.FIRING, lane_lock="L")
    assert row(second).state == State.PENDING


def test_claim_restricted_to_lanes(clock, sinks):
    sinks(KIND)
    django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="X", delay="0s")
    y = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="Y", delay="0s")
    django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert [c.wake.pk for c in engine.claim_batch(runner_id="A", lanes=["Y"])] == [y.pk]


# --------------------------------------------------------------------------------------------------
# Event and approval wakes respect lanes
# --------------------------------------------------------------------------------------------------


def test_a_delivered_event_waits_for_its_lane_with_its_result_saved(clock, sinks):
    calls = sinks(KIND)
    blocker = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    watcher = django_wakes.watch(workspace_id=WS, kind=KIND, serial_key="L", event_key="build.done", expires_in="10m")
    (held,) = engine.claim_batch(runner_id="A")
    assert held.wake.pk == blocker.pk

    assert django_wakes.deliver_event(workspace_id=WS, event_key="build.done", payload={"sha": "abc"}) == 1
    waiting = row(watcher)
    expected = {"trigger": "on_event", "event_key": "build.done", "payload": {"sha": "abc"}}
    assert waiting.state == State.PENDING
    assert waiting.result == expected
    assert waiting.fire_at == clock.now()
    assert engine.claim_batch(runner_id="B") == []
    assert django_wakes.run_due(runner_id="B").claimed == 0

    # the watch's expiry passes while it waits: it was triggered in time, so it fires with the event
    clock.advance("11m")
    assert engine.fire(held).settled
    report = django_wakes.run_due(runner_id="B")
    assert report.fired == 1 and report.expired == 0
    assert calls.ids == [blocker.pk, watcher.pk]
    assert calls.results[1] == expected
    assert row(watcher).state == State.FIRED


def test_a_resolved_approval_waits_for_its_lane_with_its_answer_saved(clock, sinks):
    calls = sinks(KIND)
    blocker = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    request = django_wakes.request_approval(
        workspace_id="ws-lanes-demo", kind=KIND, serial_key="L", prompt="Deploy?", expires_in="10m"
    )
    (held,) = engine.claim_batch(runner_id="A")
    assert held.wake.pk == blocker.pk
    django_wakes.resolve(request.token, {"approved": True}, "demo")
    expected = {"trigger": "on_approval", "answer": {"approved": True}, "resolved_by": "demo"}
    assert row(request.wake).result == expected
    assert engine.claim_batch(runner_id="B") == []
    clock.advance("20m")
    engine.fire(held)
    assert django_wakes.run_due(runner_id="B").fired == 1
    assert calls.results == [{"trigger": "at"}, expected]
    assert row(request.wake).state == State.FIRED


def test_an_untriggered_watch_does_not_block_its_lane(clock, sinks):
    calls = sinks(KIND)
    watcher = django_wakes.watch(workspace_id=WS, kind=KIND, serial_key="L", event_key="never")
    later = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="1m")
    clock.advance("1m")
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [later.pk]
    assert row(watcher).state == State.PENDING


def test_an_event_wake_queues_behind_an_earlier_due_wake_in_its_lane(clock, sinks):
    calls = sinks(KIND)
    watcher = django_wakes.watch(workspace_id=WS, kind=KIND, serial_key="L", event_key="go")
    clock.advance("1m")
    timed = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", at=clock.now() - timedelta(seconds=30))
    assert django_wakes.deliver_event(workspace_id=WS, event_key="go") == 1
    django_wakes.run_due()
    django_wakes.run_due()
    assert calls.ids == [timed.pk, watcher.pk]
