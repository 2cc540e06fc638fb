"""Chains as operators manage them: pause/resume, trigger now, backfill, and the chain's admin page.

The engine transitions are driven through the public API under a fake clock; the races with a
runner are played out step by step (the runner's candidate read, then the operator, then the
runner's lock) and, on databases with row locks, with a real second connection holding a settle open.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection, connections, transaction
from django.urls import reverse

import django_wakes
from django_wakes import engine
from django_wakes.engine.schedules import MAX_BACKFILL
from django_wakes.exceptions import InvalidSchedule, InvalidTime, OperationRefused, WakeError
from django_wakes.models import State, Wake
from django_wakes.schedules import recurrence
from django_wakes.testing import FakeClock, fake_clock

KIND = "test.chain"
T0 = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)  # a Monday
HOUR = timedelta(hours=1)


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    with fake_clock(T0) as fake:
        yield fake


@pytest.fixture(autouse=True)
def calls(sinks: Any) -> Any:
    return sinks(KIND)


def hourly(**extra: Any) -> Wake:
    """An hourly chain on the hour; its first occurrence is 13:00."""
    return django_wakes.schedule(workspace_id="ws-chain", kind=KIND, cron="0 * * * *", tz="UTC", **extra)


def rows(chain_id: str) -> list[Wake]:
    return list(Wake.objects.filter(chain_id=chain_id).order_by("fire_at", "id"))


def pending(chain_id: str) -> list[Wake]:
    return list(Wake.objects.filter(chain_id=chain_id, state=State.PENDING).order_by("fire_at", "id"))


def fire_at(clock: FakeClock, moment: datetime) -> Any:
    clock.set(moment)
    return django_wakes.run_due()


# --------------------------------------------------------------------------------------------------
# pause / resume
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_pause_holds_the_pending_occurrence_and_resume_gives_it_back(clock: FakeClock, calls: Any) -> None:
    first = hourly()
    said = django_wakes.pause_chain(first.chain_id)
    assert "1 pending occurrence(s) held" in said
    first.refresh_from_db()
    assert first.state == State.PENDING and first.due_at is None
    assert first.paused_at == T0 and first.paused_due_at == T0 + HOUR
    assert fire_at(clock, T0 + 3 * HOUR).fired == 0  # its slot came and went: nothing fired
    assert calls == []
    with pytest.raises(OperationRefused, match="already paused"):
        django_wakes.pause_chain(first.chain_id)

    said = django_wakes.resume_chain(first.chain_id)
    assert "1 occurrence(s) due again" in said
    first.refresh_from_db()
    assert first.due_at == T0 + HOUR and first.paused_at is None and first.paused_due_at is None
    assert fire_at(clock, T0 + 3 * HOUR).fired == 1  # replay: the held slot fires, late
    assert calls.results[0]["slot"] == (T0 + HOUR).isoformat()
    with pytest.raises(OperationRefused, match="not paused"):
        django_wakes.resume_chain(first.chain_id)


@pytest.mark.django_db
def test_resume_of_a_long_paused_chain_lets_catch_up_decide(clock: FakeClock, calls: Any) -> None:
    first = hourly(catch_up="skip")
    django_wakes.pause_chain(first.chain_id)
    clock.set(T0 + 5 * HOUR + timedelta(minutes=10))
    django_wakes.resume_chain(first.chain_id)
    django_wakes.run_due()
    assert calls == []  # skip: the held 13:00 and the slots after it do not fire
    first.refresh_from_db()
    assert first.state == State.CANCELLED and first.result["skipped"] and first.result["missed"] == 5
    assert [w.fire_at for w in pending(first.chain_id)] == [T0 + 6 * HOUR]


@pytest.mark.django_db
def test_a_runner_that_read_the_occurrence_before_the_pause_does_not_claim_it(clock: FakeClock) -> None:
    first = hourly()
    clock.set(T0 + HOUR)
    candidates = list(Wake.objects.claimable(clock.now(), [KIND]).values_list("id", flat=True))
    assert candidates == [first.pk]  # the runner's plain read saw it due ...
    django_wakes.pause_chain(first.chain_id)  # ... then the operator paused the chain
    with transaction.atomic():
        assert (
            list(Wake.objects.lock_pending(candidates, clock.now())) == []
        )  # ... so the runner's locked read drops it
    assert django_wakes.run_due().fired == 0


@pytest.mark.django_db
def test_pausing_a_firing_occurrence_books_its_successor_held(clock: FakeClock, calls: Any) -> None:
    first = hourly()
    clock.set(T0 + HOUR)
    claims = engine.claim_batch(runner_id="r1")
    assert [c.wake.pk for c in claims] == [first.pk]
    said = django_wakes.pause_chain(first.chain_id)  # the occurrence is firing now
    assert "1 occurrence(s) firing now finish" in said
    engine.fire_claims(claims)  # it finishes and books 14:00 ...
    (successor,) = pending(first.chain_id)
    assert successor.fire_at == T0 + 2 * HOUR
    assert successor.due_at is None and successor.paused_due_at == T0 + 2 * HOUR  # ... held
    assert fire_at(clock, T0 + 2 * HOUR).fired == 0
    django_wakes.resume_chain(first.chain_id)
    assert django_wakes.run_due().fired == 1
    assert len(calls) == 2


@pytest.mark.django_db
def test_a_held_occurrence_fired_by_hand_keeps_the_chain_paused(clock: FakeClock, calls: Any) -> None:
    first = hourly(catch_up="skip")
    django_wakes.pause_chain(first.chain_id)
    clock.set(T0 + 3 * HOUR + timedelta(minutes=5))
    engine.fire_now(first.pk)  # the wake page's button on the held 13:00 row
    django_wakes.run_due()  # skip: 13:00 is long past, so it is closed and 16:00 booked ...
    (successor,) = pending(first.chain_id)
    assert successor.fire_at == T0 + 4 * HOUR and successor.due_at is None  # ... held: still paused
    assert calls == []


@pytest.mark.django_db(transaction=True)
def test_a_pause_racing_a_settle_holds_the_occurrence_the_settle_books(clock: FakeClock) -> None:
    """A settle holds the firing row's lock while it books the successor; the pause waits, then holds it."""
    if not connection.features.has_select_for_update or connection.vendor == "sqlite":
        pytest.skip("needs row locks held by a second connection")
    first = hourly()
    clock.set(T0 + HOUR)
    (claim,) = engine.claim_batch(runner_id="r1")
    booked, release, done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def settle_in_another_connection() -> None:
        try:
            with transaction.atomic():  # what settle_successes does, held open
                Wake.objects.filter(pk=first.pk, state=State.FIRING).update(state=State.FIRED, settled_at=T0 + HOUR)
                engine.book_next(claim.wake, T0 + HOUR)
                booked.set()
                release.wait(10)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()
            booked.set()

    def pause() -> None:
        try:
            django_wakes.pause_chain(first.chain_id)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()
            done.set()

    settler = threading.Thread(target=settle_in_another_connection)
    settler.start()
    assert booked.wait(10)
    pauser = threading.Thread(target=pause)
    pauser.start()
    assert not done.wait(0.5)  # the pause waits for the settle's lock (it would be wrong to go on)
    release.set()
    settler.join(10)
    pauser.join(10)
    assert errors == []
    (successor,) = pending(first.chain_id)
    assert successor.fire_at == T0 + 2 * HOUR
    assert successor.due_at is None and successor.paused_at is not None  # the new occurrence is held


# --------------------------------------------------------------------------------------------------
# trigger now
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_trigger_now_fires_once_without_touching_the_grid(clock: FakeClock, calls: Any) -> None:
    first = hourly()
    clock.set(T0 + timedelta(minutes=20))
    extra = django_wakes.trigger_chain(first.chain_id, request_id="form-1")
    again = django_wakes.trigger_chain(first.chain_id, request_id="form-1")  # a resubmitted form
    assert again.pk == extra.pk
    assert not extra.is_recurring and extra.chain_id == first.chain_id
    assert django_wakes.run_due().fired == 1
    assert calls.results == [{"trigger": "at", "slot": (T0 + timedelta(minutes=20)).isoformat(), "manual": True}]
    first.refresh_from_db()
    assert first.state == State.PENDING and first.due_at == T0 + HOUR  # the grid is untouched
    assert [w.pk for w in pending(first.chain_id)] == [first.pk]  # and the extra firing booked nothing
    fire_at(clock, T0 + HOUR)
    assert [w.fire_at for w in pending(first.chain_id)] == [T0 + 2 * HOUR]


@pytest.mark.django_db
def test_transitions_refuse_an_unknown_chain_and_bad_input(clock: FakeClock) -> None:
    for transition in (django_wakes.pause_chain, django_wakes.resume_chain, django_wakes.trigger_chain):
        with pytest.raises(OperationRefused, match="no chain"):
            transition("0" * 32)
        with pytest.raises(WakeError):
            transition("")
    first = hourly()
    with pytest.raises(InvalidTime):
        django_wakes.backfill_chain(first.chain_id, start=datetime(2030, 1, 7), end=T0)  # naive
    with pytest.raises(InvalidSchedule, match="before start"):
        django_wakes.backfill_chain(first.chain_id, start=T0, end=T0 - HOUR)
    with pytest.raises(InvalidSchedule, match="in the future"):
        django_wakes.backfill_chain(first.chain_id, start=T0 + HOUR, end=T0 + 2 * HOUR)
    assert Wake.objects.count() == 1  # nothing half-written


@pytest.mark.django_db
def test_backfill_is_bounded(clock: FakeClock) -> None:
    minutely = django_wakes.schedule(workspace_id="w", kind=KIND, cron="* * * * *", catch_up="skip")
    fire_at(clock, T0 + 20 * HOUR)  # 1,200 minutes skipped
    with pytest.raises(InvalidSchedule, match=f"at most {MAX_BACKFILL}"):
        django_wakes.backfill_chain(minutely.chain_id, start=T0, end=clock.now())
    assert Wake.objects.filter(result__backfill=True).count() == 0  # nothing half-written
    done = django_wakes.backfill_chain(minutely.chain_id, start=T0 + 10 * HOUR, end=clock.now())
    assert len(done.booked) == 601  # 22:00 … 08:00, both ends included


# --------------------------------------------------------------------------------------------------
# backfill
# --------------------------------------------------------------------------------------------------


def _outage(clock: FakeClock, catch_up: str) -> Wake:
    """A chain whose runners were down from 12:30 to 17:30: under skip/latest one claim settles it."""
    first = hourly(catch_up=catch_up)
    clock.set(T0 + 5 * HOUR + timedelta(minutes=30))
    django_wakes.run_due()
    return first


@pytest.mark.django_db
def test_backfill_books_each_slot_skip_dropped_once(clock: FakeClock, calls: Any) -> None:
    first = _outage(clock, "skip")
    assert calls == []  # 13:00 … 17:00 were skipped; 18:00 is booked
    done = django_wakes.backfill_chain(first.chain_id, start=T0, end=clock.now())
    assert len(done.booked) == 5 and done.revived == 1  # 13:00 (the skipped row itself) … 17:00
    assert [w.fire_at for w in done.booked] == [T0 + k * HOUR for k in range(1, 6)]
    assert done.booked[0].pk == first.pk  # the first occurrence's row, revived (it never fired)
    assert all(w.idempotency_key == recurrence.chain_key(first.chain_id, w.fire_at) for w in done.booked[1:])
    again = django_wakes.backfill_chain(first.chain_id, start=T0, end=clock.now())
    assert again.booked == [] and again.had_occurrence == 5  # idempotent per slot
    report = django_wakes.run_due()
    while report.fired:
        report = django_wakes.run_due()
    assert [r["slot"] for r in calls.results] == [(T0 + k * HOUR).isoformat() for k in range(1, 6)]  # oldest first
    assert all(r["backfill"] for r in calls.results)
    # The chain goes on from 18:00 as if nothing happened: one recurring row, booked by the chain.
    (live,) = pending(first.chain_id)
    assert live.fire_at == T0 + 6 * HOUR and live.is_recurring
    fire_at(clock, T0 + 6 * HOUR)
    assert [w.fire_at for w in pending(first.chain_id)] == [T0 + 7 * HOUR]


@pytest.mark.django_db
def test_backfill_leaves_a_slot_latest_fired_for(clock: FakeClock, calls: Any) -> None:
    first = _outage(clock, "latest")
    assert calls.results[0]["slot"] == (T0 + 5 * HOUR).isoformat() and calls.results[0]["missed"] == 4
    done = django_wakes.backfill_chain(first.chain_id, start=T0, end=clock.now())
    # 13:00 has its row (it fired, standing for 17:00); 17:00 fired through it; 14:00 … 16:00 never did.
    assert [w.fire_at for w in done.booked] == [T0 + 2 * HOUR, T0 + 3 * HOUR, T0 + 4 * HOUR]
    assert done.had_occurrence == 2


@pytest.mark.django_db
def test_backfill_finds_the_fold_behind_a_firing_triggered_by_hand(clock: FakeClock, calls: Any) -> None:
    first = hourly(catch_up="latest")
    clock.set(T0 + HOUR + timedelta(minutes=10))  # runners are down; the operator fires it by hand
    django_wakes.trigger_chain(first.chain_id)
    clock.set(T0 + 5 * HOUR + timedelta(minutes=30))
    django_wakes.run_due()  # the manual firing, and 13:00 standing for 17:00
    done = django_wakes.backfill_chain(first.chain_id, start=T0 + 2 * HOUR, end=clock.now())
    assert [w.fire_at for w in done.booked] == [T0 + 2 * HOUR, T0 + 3 * HOUR, T0 + 4 * HOUR]  # not 17:00


@pytest.mark.django_db
def test_backfill_stops_before_the_live_occurrence(clock: FakeClock, calls: Any) -> None:
    """Slots from the live occurrence on are the chain's own (its catch-up folds them): not backfilled."""
    first = _outage(clock, "latest")  # 13:00 fired for 17:00; 18:00 is pending
    clock.set(T0 + 8 * HOUR + timedelta(minutes=30))  # down again: 18:00, 19:00, 20:00 have passed
    done = django_wakes.backfill_chain(first.chain_id, start=T0 - 3 * HOUR, end=clock.now())
    assert [w.fire_at for w in done.booked] == [T0 + 2 * HOUR, T0 + 3 * HOUR, T0 + 4 * HOUR]  # not before 13:00
    assert done.after_live
    calls.clear()
    for _ in range(6):
        django_wakes.run_due()
    assert sorted(r["slot"] for r in calls.results) == [(T0 + k * HOUR).isoformat() for k in (2, 3, 4, 8)]
    (live,) = pending(first.chain_id)
    assert live.fire_at == T0 + 9 * HOUR and live.is_recurring  # the chain still recurs


@pytest.mark.django_db
def test_backfill_of_a_paused_chain_books_held_rows(clock: FakeClock, calls: Any) -> None:
    first = _outage(clock, "skip")
    django_wakes.pause_chain(first.chain_id)
    done = django_wakes.backfill_chain(first.chain_id, start=T0, end=clock.now())
    assert len(done.booked) == 5
    assert django_wakes.run_due().fired == 0
    django_wakes.resume_chain(first.chain_id)
    fired = 0
    while report := django_wakes.run_due():
        if not report.fired:
            break
        fired += report.fired
    assert fired == 5


@pytest.mark.django_db
def test_backfill_of_an_ended_chain_books_nothing_after_its_last_occurrence(clock: FakeClock, calls: Any) -> None:
    """An operator ended the chain by cancelling its occurrence: the slots after it were never the chain's."""
    first = hourly()
    fire_at(clock, T0 + HOUR)  # 13:00 fires, 14:00 is booked
    (second,) = pending(first.chain_id)
    engine.cancel_wake(second.pk)  # the chain ends at 14:00
    clock.set(T0 + 5 * HOUR + timedelta(minutes=30))
    done = django_wakes.backfill_chain(first.chain_id, start=T0, end=clock.now())
    assert done.booked == [] and done.cancelled == 1 and done.after_end
    assert "the chain has ended" in done.message
    assert pending(first.chain_id) == []
    assert django_wakes.run_due().fired == 0
    assert len(calls) == 1  # 13:00 only


@pytest.mark.django_db
def test_rows_held_by_a_chain_that_ended_while_paused_can_still_be_resumed(
    clock: FakeClock, calls: Any, client: Any, django_user_model: Any
) -> None:
    """Backfilled while paused, then the held occurrence cancelled: the backfill rows must not stay pending forever."""
    first = _outage(clock, "skip")  # 13:00 … 17:00 skipped, 18:00 pending
    django_wakes.pause_chain(first.chain_id)
    done = django_wakes.backfill_chain(first.chain_id, start=T0, end=clock.now())
    assert len(done.booked) == 5
    (held_occurrence,) = [w for w in pending(first.chain_id) if w.is_recurring]
    engine.cancel_wake(held_occurrence.pk)  # the chain ends
    client.force_login(staff(django_user_model, "operator4", "view_wake", "operate_wake"))
    assert 'id="chain-resume"' in client.get(chain_url(first.chain_id)).content.decode()
    said = django_wakes.resume_chain(first.chain_id)
    assert "5 occurrence(s) due again" in said
    fired = 0
    while report := django_wakes.run_due():
        if not report.fired:
            break
        fired += report.fired
    assert fired == 5 and pending(first.chain_id) == []
    with pytest.raises(OperationRefused, match="not paused"):
        django_wakes.resume_chain(first.chain_id)


@pytest.mark.django_db
def test_backfill_leaves_out_slots_older_than_gc_keeps_their_rows(clock: FakeClock, calls: Any, settings: Any) -> None:
    """gc deleted the rows of 13:00 … 15:00, which fired: with no row left to say so, they must not fire again."""
    settings.WAKES = {**getattr(settings, "WAKES", {}), "GC_AFTER": "1d"}
    first = hourly(catch_up="latest")
    for k in (1, 2, 3):
        fire_at(clock, T0 + k * HOUR)
    clock.set(T0 + 3 * 24 * HOUR + timedelta(minutes=30))
    django_wakes.run_due()  # 16:00 fires, standing for the newest slot; the chain goes on
    assert len(calls) == 4
    assert django_wakes.gc(older_than="1d") == 3  # the 13:00, 14:00 and 15:00 rows (occurrence 0 among them)
    done = django_wakes.backfill_chain(first.chain_id, start=T0, end=T0 + 4 * HOUR)
    assert done.booked == [] and done.gc_cut == clock.now() - 24 * HOUR
    assert "gc may have deleted" in done.message
    assert django_wakes.run_due().fired == 0 and len(calls) == 4
    # Inside what gc keeps, the slots the latest fold left behind are still backfilled.
    recent = django_wakes.backfill_chain(first.chain_id, start=clock.now() - 3 * HOUR, end=clock.now())
    assert [w.fire_at for w in recent.booked] == [T0 + k * HOUR for k in (70, 71)]  # 72 is the one 16:00 fired for
    assert recent.gc_cut is None


# --------------------------------------------------------------------------------------------------
# The chain page
# --------------------------------------------------------------------------------------------------


def staff(django_user_model: Any, name: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_wakes", codename__in=codenames)
    )
    return user


def chain_url(chain_id: str) -> str:
    return reverse("admin:django_wakes_chain", args=[chain_id])


@pytest.mark.django_db
def test_chain_page_shows_history_and_next_times_with_dst_marked(client: Any, django_user_model: Any) -> None:
    with fake_clock(datetime(2025, 3, 27, 12, tzinfo=UTC)) as clock:
        first = django_wakes.schedule(workspace_id="w", kind=KIND, cron="30 2 * * *", tz="Europe/Paris")
        fire_at(clock, first.due_at)
        client.force_login(staff(django_user_model, "viewer", "view_wake"))
        html = client.get(chain_url(first.chain_id)).content.decode()
    assert "cron 30 2 * * * (Europe/Paris)" in html
    assert f'data-wake="{first.pk}" data-state="fired"' in html  # the past occurrence, with its outcome
    assert "Sat 2025-03-29 02:30:00 CET" in html  # the next fire times, local ...
    assert "2025-03-29 01:30:00Z" in html  # ... and UTC
    assert "clocks go forward 02:00 → 03:00 (CET → CEST)" in html
    assert "Sun 2025-03-30 03:00:00 CEST" in html and "moved to 03:00: 02:30 not on the clock" in html
    assert 'id="chain-pause"' not in html and 'id="chain-trigger"' not in html  # no buttons without operate


@pytest.mark.django_db
def test_chain_buttons_are_refused_without_the_operate_permission(client: Any, django_user_model: Any) -> None:
    first = hourly()
    client.force_login(staff(django_user_model, "viewer2", "view_wake", "change_wake"))
    for action in ("pause", "trigger", "backfill"):
        response = client.post(chain_url(first.chain_id), {"action": action, "confirmed": "yes"})
        assert response.status_code == 403
    first.refresh_from_db()
    assert first.paused_at is None and Wake.objects.count() == 1


@pytest.mark.django_db
def test_chain_buttons_confirm_then_act_and_say_what_happened(client: Any, django_user_model: Any) -> None:
    with fake_clock(T0) as clock:
        first = hourly(catch_up="skip")
        client.force_login(staff(django_user_model, "operator", "view_wake", "operate_wake"))
        url = chain_url(first.chain_id)
        assert 'id="chain-pause"' in client.get(url).content.decode()
        asked = client.post(url, {"action": "pause"})
        assert asked.status_code == 200 and "Pause chain" in asked.content.decode()
        first.refresh_from_db()
        assert first.paused_at is None  # the first press only asks
        done = client.post(url, {"action": "pause", "confirmed": "yes"}, follow=True)
        assert "is paused: 1 pending occurrence(s) held" in done.content.decode()
        first.refresh_from_db()
        assert first.paused_at is not None
        again = client.post(url, {"action": "pause", "confirmed": "yes"}, follow=True)
        assert "already paused" in again.content.decode()  # refused, said why
        client.post(url, {"action": "trigger", "confirmed": "yes", "request_id": "abc"})
        client.post(url, {"action": "trigger", "confirmed": "yes", "request_id": "abc"})
        assert Wake.objects.filter(chain_id=first.chain_id, result__manual=True).count() == 1
        client.post(url, {"action": "resume", "confirmed": "yes"})
        fire_at(clock, T0 + 4 * HOUR + timedelta(minutes=30))  # skip: 13:00 … 16:00 skipped, 17:00 booked
        bad = client.post(url, {"action": "backfill", "start": "2030-01-07T15:00", "end": "2030-01-07T13:00"})
        assert bad.status_code == 400 and "before its start" in bad.content.decode()
        range_ = {"action": "backfill", "start": "2030-01-07T14:00", "end": "2030-01-07T16:00"}
        assert "Backfill chain" in client.post(url, range_).content.decode()
        done = client.post(url, {**range_, "confirmed": "yes"}, follow=True)
        assert "3 slot(s) booked" in done.content.decode()
        assert Wake.objects.filter(chain_id=first.chain_id, result__backfill=True).count() == 3  # 14:00 … 16:00
        assert client.post(url, {"action": "nonsense", "confirmed": "yes"}).status_code == 400
        assert client.get(chain_url("f" * 32)).status_code == 404


@pytest.mark.django_db
def test_the_backfill_confirmation_counts_from_where_a_backfill_would_start(
    client: Any, django_user_model: Any
) -> None:
    """A start typed a century back is counted from the chain's first occurrence (fast); year 1 is a form error."""
    with fake_clock(T0) as clock:
        minutely = django_wakes.schedule(workspace_id="w", kind=KIND, cron="* * * * *", tz="UTC")
        paris = django_wakes.schedule(workspace_id="w", kind=KIND, cron="0 * * * *", tz="Europe/Paris")
        clock.set(T0 + HOUR)
        client.force_login(staff(django_user_model, "operator3", "view_wake", "operate_wake"))
        asked = client.post(
            chain_url(minutely.chain_id), {"action": "backfill", "start": "1900-01-01T00:00", "end": "2030-01-07T13:00"}
        )
        assert asked.status_code == 200
        assert asked.context["slots"] == 60  # 12:01 … 13:00: the chain began at 12:01
        for chain in (minutely, paris):  # 00:00 UTC minus a microsecond; 00:09 LMT, before year 1 in UTC
            year_one = {
                "action": "backfill",
                "start": "0001-01-01T00:00",
                "end": "2030-01-07T13:00",
                "confirmed": "yes",
            }
            refused = client.post(chain_url(chain.chain_id), year_one)
            assert refused.status_code == 400 and "out of range" in refused.content.decode()
        assert not Wake.objects.filter(result__backfill=True).exists()
