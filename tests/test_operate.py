"""Operator transitions (``engine.operate``): each applies once, to the right states, and says why not otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import InvalidTime, InvalidWake, OperationRefused
from django_wakes.models import Outcome, PausedLane, State, Wake
from django_wakes.testing import fake_clock
from tests.factories import WakeFactory

pytestmark = pytest.mark.django_db

KIND = "test.operate"
START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def calls(sinks: Any) -> Any:
    return sinks(KIND)


def later(wake: Wake) -> Wake:
    wake.refresh_from_db()
    return wake


def test_fire_now_makes_a_future_wake_fire_on_the_next_pass(calls: Any) -> None:
    with fake_clock(START):
        wake = django_wakes.schedule(workspace_id="w", delay="3d", kind=KIND)
        assert django_wakes.run_due().fired == 0
        message = engine.fire_now(wake.pk)
        assert message == f"Wake {wake.pk} is due now; the next runner pass fires it."
        assert later(wake).due_at == START
        assert later(wake).fire_at == START + timedelta(days=3)  # the scheduled time is kept
        assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk]


def test_fire_now_says_what_holds_the_lane() -> None:
    with fake_clock(START):
        holder = WakeFactory(
            kind=KIND,
            serial_key="acct:1",
            state=State.FIRING,
            lane_lock="acct:1",
            claim_token="t" * 32,
            lease_until=START + timedelta(minutes=1),
        )
        waiting = django_wakes.schedule(workspace_id="w", delay="1h", kind=KIND, serial_key="acct:1")
        assert f"held by wake {holder.pk}" in engine.fire_now(waiting.pk)
        engine.pause_lane("acct:1", by="ops", reason="migration")
        assert "lane 'acct:1' is paused" in engine.fire_now(waiting.pk)


@pytest.mark.parametrize("state", [State.FIRING, State.FIRED, State.CANCELLED, State.DEAD])
def test_fire_now_refuses_what_is_not_pending(state: str) -> None:
    wake = WakeFactory(kind=KIND, state=state, claim_token="t" * 32 if state == State.FIRING else None)
    before = (wake.state, wake.due_at, wake.updated_at)
    with pytest.raises(OperationRefused, match=f"wake {wake.pk} is {state}"):
        engine.fire_now(wake.pk)
    assert (later(wake).state, wake.due_at, wake.updated_at) == before


def test_fire_now_refuses_a_watcher_whose_event_has_not_come() -> None:
    watcher = django_wakes.watch(workspace_id="w", event_key="ci:pass", expires_in="1h", kind=KIND)
    with pytest.raises(OperationRefused, match="waits for its event"):
        engine.fire_now(watcher.pk)
    assert later(watcher).due_at == watcher.expires_at


def test_an_unknown_wake_and_a_bad_id_are_refused_cleanly() -> None:
    with pytest.raises(OperationRefused, match="wake 123456 does not exist"):
        engine.fire_now(123456)
    with pytest.raises(InvalidWake):
        engine.reschedule("7", START)  # type: ignore[arg-type]


def test_reschedule_moves_a_one_shot_and_refuses_what_it_cannot_move() -> None:
    with fake_clock(START):
        wake = django_wakes.schedule(workspace_id="w", delay="1h", kind=KIND)
        target = START + timedelta(hours=5, seconds=7)
        assert engine.reschedule(wake.pk, target) == f"Wake {wake.pk} is now due at {target.isoformat()}."
        assert (later(wake).fire_at, wake.due_at) == (target, target)
        with pytest.raises(InvalidTime):
            engine.reschedule(wake.pk, datetime(2030, 1, 2))  # naive: refused, nothing written
        assert later(wake).due_at == target

        chain = django_wakes.schedule(workspace_id="w", kind=KIND, cron="0 9 * * *", tz="Europe/Paris")
        with pytest.raises(OperationRefused, match="occurrence of chain"):
            engine.reschedule(chain.pk, target)
        watcher = django_wakes.watch(workspace_id="w", event_key="k", expires_in="1h", kind=KIND)
        with pytest.raises(OperationRefused, match="extend the expiry instead"):
            engine.reschedule(watcher.pk, target)
        expiring = django_wakes.schedule(workspace_id="w", delay="1h", kind=KIND, expires_in="2h")
        with pytest.raises(OperationRefused, match="extend its expiry"):
            engine.reschedule(expiring.pk, START + timedelta(hours=3))
        assert later(expiring).fire_at == START + timedelta(hours=1)


def test_reschedule_refuses_a_firing_wake_with_the_reason() -> None:
    wake = WakeFactory(kind=KIND, state=State.FIRING, claim_token="t" * 32)
    with pytest.raises(OperationRefused, match=f"wake {wake.pk} is firing: it cannot be rescheduled until it settles"):
        engine.reschedule(wake.pk, START)


def test_reschedule_of_a_failing_wake_moves_only_its_retry(sinks: Any) -> None:
    sinks(KIND, RuntimeError("down"))
    with fake_clock(START) as fake:
        wake = django_wakes.schedule(workspace_id="w", delay="1s", kind=KIND)
        fake.advance("1s")
        assert django_wakes.run_due().failed == 1
        scheduled = later(wake).fire_at
        engine.reschedule(wake.pk, START + timedelta(hours=2))
        assert later(wake).due_at == START + timedelta(hours=2)
        assert wake.fire_at == scheduled


def test_extend_expiry_pushes_a_watchers_deadline_and_due_time() -> None:
    with fake_clock(START) as fake:
        watcher = django_wakes.watch(workspace_id="w", event_key="k", expires_in="1h", kind=KIND)
        until = START + timedelta(hours=6)
        assert engine.extend_expiry(watcher.pk, until) == f"Wake {watcher.pk} now expires at {until.isoformat()}."
        assert (later(watcher).expires_at, watcher.due_at) == (until, until)
        fake.advance("2h")
        assert django_wakes.run_due().expired == 0  # it would have expired at 1h
        assert django_wakes.deliver_event(workspace_id="w", event_key="k") == 1
        with pytest.raises(OperationRefused, match="already triggered"):
            engine.extend_expiry(watcher.pk, until + timedelta(hours=1))


def test_extend_expiry_refuses_earlier_times_and_wakes_without_expiry() -> None:
    with fake_clock(START):
        watcher = django_wakes.watch(workspace_id="w", event_key="k", expires_in="1h", kind=KIND)
        with pytest.raises(OperationRefused, match="must be later"):
            engine.extend_expiry(watcher.pk, START + timedelta(minutes=30))
        plain = django_wakes.schedule(workspace_id="w", delay="1h", kind=KIND)
        with pytest.raises(OperationRefused, match="has no expiry"):
            engine.extend_expiry(plain.pk, START + timedelta(hours=2))
    assert later(watcher).expires_at == START + timedelta(hours=1)
    expired = WakeFactory(kind=KIND, state=State.EXPIRED)
    with pytest.raises(OperationRefused, match="already expired"):
        engine.extend_expiry(expired.pk, START + timedelta(hours=2))


def test_cancel_and_retry_say_what_happened_or_why_not(sinks: Any) -> None:
    pending = django_wakes.schedule(workspace_id="w", delay="1h", kind=KIND)
    assert engine.cancel_wake(pending.pk) == f"Wake {pending.pk} was cancelled."
    with pytest.raises(OperationRefused, match="is cancelled: only a pending wake can be cancelled"):
        engine.cancel_wake(pending.pk)
    firing = WakeFactory(kind=KIND, state=State.FIRING, claim_token="t" * 32)
    with pytest.raises(OperationRefused, match="cannot be cancelled mid-fire"):
        engine.cancel_wake(firing.pk)
    dead = WakeFactory(kind=KIND, state=State.DEAD, attempts=5, last_error="boom")
    assert "requeued" in engine.retry_wake(dead.pk)
    assert (later(dead).state, dead.attempts) == (State.PENDING, 0)
    with pytest.raises(OperationRefused, match="only a dead wake can be retried .use fire now"):
        engine.retry_wake(dead.pk)


def test_cancelling_a_firing_occurrence_ends_its_chain() -> None:
    occurrence = WakeFactory(
        kind=KIND, state=State.FIRING, claim_token="t" * 32, cron="* * * * *", chain_id="c1", fire_at=START
    )
    assert "its chain ends after this occurrence" in engine.cancel_wake(occurrence.pk)
    assert later(occurrence).end_at == START


def test_a_paused_lane_is_not_claimed_until_resumed(calls: Any) -> None:
    with fake_clock(START) as fake:
        first = django_wakes.schedule(workspace_id="w", delay="1s", kind=KIND, serial_key="acct:9")
        second = django_wakes.schedule(workspace_id="w", delay="2s", kind=KIND, serial_key="acct:9")
        other = django_wakes.schedule(workspace_id="w", delay="1s", kind=KIND, serial_key="acct:10")
        assert engine.pause_lane("acct:9", by="alice", reason="card processor down") is True
        assert engine.pause_lane("acct:9", by="bob") is False  # already paused: the first pause stays
        assert PausedLane.objects.get(serial_key="acct:9").paused_by == "alice"
        fake.advance("5s")
        assert django_wakes.run_due().outcomes == {other.pk: Outcome.FIRED}
        assert engine.resume_lane("acct:9") is True
        assert engine.resume_lane("acct:9") is False
        django_wakes.run_due()
        django_wakes.run_due()
    assert calls.ids == [other.pk, first.pk, second.pk]


def test_pause_lane_refuses_bad_input() -> None:
    with pytest.raises(InvalidWake):
        engine.pause_lane("")
    with pytest.raises(InvalidWake):
        engine.pause_lane("x" * 201)
    with pytest.raises(InvalidWake):
        engine.pause_lane("lane", reason=None)  # type: ignore[arg-type]
    assert not PausedLane.objects.exists()


def test_extend_expiry_refuses_when_a_reschedule_moved_the_wake_meanwhile(monkeypatch: Any) -> None:
    """Two operators: the expiry's due time is computed from the fire_at read, so a move since then refuses it."""
    from django_wakes.engine import operate

    with fake_clock(START):
        wake = django_wakes.schedule(workspace_id="w", delay="1h", kind=KIND, expires_in="2h")
        moved = START + timedelta(minutes=90)
        real_earliest = operate.earliest

        def reschedule_first(*moments: Any) -> Any:  # the other operator's reschedule commits in between
            engine.reschedule(wake.pk, moved)
            return real_earliest(*moments)

        monkeypatch.setattr(operate, "earliest", reschedule_first)
        with pytest.raises(OperationRefused, match="changed meanwhile"):
            engine.extend_expiry(wake.pk, START + timedelta(hours=5))
    assert (later(wake).fire_at, wake.due_at, wake.expires_at) == (moved, moved, START + timedelta(hours=2))


def test_cancel_says_the_chain_ends_when_a_runner_claimed_the_occurrence_meanwhile(monkeypatch: Any) -> None:
    from django_wakes.engine import operate

    with fake_clock(START) as fake:
        occurrence = django_wakes.schedule(workspace_id="w", kind=KIND, cron="0 * * * *", tz="UTC")
        fake.set(occurrence.due_at)
        real_cancel = operate.cancel

        def claimed_first(wake_id: int) -> bool:  # a runner claims the occurrence between the read and the cancel
            assert [c.wake.pk for c in engine.claim_batch(runner_id="r1")] == [wake_id]
            return real_cancel(wake_id)

        monkeypatch.setattr(operate, "cancel", claimed_first)
        said = engine.cancel_wake(occurrence.pk)
    assert said.endswith("is firing and cannot be stopped mid-fire; its chain ends after this occurrence.")
    assert later(occurrence).state == State.FIRING and occurrence.end_at == occurrence.fire_at
