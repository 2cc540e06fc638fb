"""Recurring wakes (issue 3): cron/every chains, catch-up policies, the DST rule, chain endings.

Every test drives the public engine API (``schedule``/``run_due``/``cancel``) under a fake clock;
the grid tests at the end check :class:`~django_wakes.schedules.recurrence.CronGrid` directly.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import InvalidSchedule, InvalidTime, NotRegistered
from django_wakes.models import State, Wake, WakeAttempt
from django_wakes.schedules import recurrence
from django_wakes.schedules.recurrence import CronGrid, EveryGrid
from django_wakes.sinks import registry
from django_wakes.testing import FakeClock, fake_clock

KIND = "rec_tick"
T0 = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)  # a Monday, far from any DST change
BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


@dataclass
class Fired:
    pk: int
    fire_at: datetime
    occurrence: int
    result: dict[str, Any]


class Recorder(list[Fired]):
    @property
    def slots(self) -> list[datetime]:
        """The slot each firing stood for (``result["slot"]``, the catch-up aware one)."""
        return [datetime.fromisoformat(f.result["slot"]) for f in self]


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    with fake_clock(T0) as fake:
        yield fake


@pytest.fixture
def sink() -> Iterator[Callable[..., Recorder]]:
    """``sink(kind=KIND, then=None) -> Recorder``: a recording sink, unregistered afterwards.

    ``then`` is an exception instance to raise, or a callable whose return value the sink returns.
    """
    kinds: list[str] = []

    def register(kind: str = KIND, then: Any = None) -> Recorder:
        calls = Recorder()

        def recording_sink(wake: Wake, result: dict[str, Any]) -> Any:
            calls.append(Fired(wake.pk, wake.fire_at, wake.occurrence, dict(result)))
            if isinstance(then, BaseException):
                raise then
            return then(wake, result) if then is not None else None

        registry.register(kind, recording_sink, replace=True)
        kinds.append(kind)
        return calls

    yield register
    for kind in kinds:
        with contextlib.suppress(NotRegistered):
            registry.unregister(kind)


def chain_rows(chain_id: str) -> list[Wake]:
    return list(Wake.objects.filter(chain_id=chain_id).order_by("occurrence", "id"))


def pending(chain_id: str) -> Wake | None:
    return Wake.objects.filter(chain_id=chain_id, state=State.PENDING).order_by("due_at").first()


def drive(clock: FakeClock, chain_id: str, times: int, *, late: timedelta = timedelta(0)) -> None:
    """Move the clock to the chain's next due occurrence (plus ``late``) and run a pass, ``times`` times."""
    for _ in range(times):
        row = pending(chain_id)
        assert row is not None and row.due_at is not None
        clock.set(row.due_at + late)
        django_wakes.run_due()


def recurring(**kwargs: Any) -> Wake:
    return django_wakes.schedule(workspace_id="ws", kind=KIND, **kwargs)


def local(moment: datetime, tz: str) -> str:
    return moment.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


# --------------------------------------------------------------------------------------------------
# Creating a chain
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_first_occurrence_is_one_period_after_now(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    sink()
    wake = recurring(every="15m")
    assert (wake.fire_at, wake.due_at, wake.trigger_type) == (T0 + timedelta(minutes=15),) * 2 + ("at",)
    assert wake.every == timedelta(minutes=15) and wake.cron == "" and wake.catch_up == "replay"
    assert wake.occurrence == 0 and len(wake.chain_id) == 32 and wake.tz == "UTC"


@pytest.mark.django_db
def test_every_with_start_at_anchors_the_grid(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    sink()
    future = recurring(every="1h", start_at=T0 + timedelta(minutes=90))
    assert future.fire_at == T0 + timedelta(minutes=90)
    past = recurring(every="1h", start_at=T0 - timedelta(minutes=150))  # grid ..., T0-30m, T0+30m
    assert past.fire_at == T0 + timedelta(minutes=30)


@pytest.mark.django_db
def test_cron_first_occurrence_is_strictly_after_now_or_at_start(
    clock: FakeClock, sink: Callable[..., Recorder]
) -> None:
    sink()
    assert recurring(cron="0 12 * * *").fire_at == T0 + timedelta(days=1)  # now is exactly 12:00
    assert recurring(cron="*/10 * * * *").fire_at == T0 + timedelta(minutes=10)
    assert recurring(cron="0 * * * *", start_at=T0 + timedelta(hours=3)).fire_at == T0 + timedelta(hours=3)
    assert recurring(cron="0 * * * *", start_at=T0 - timedelta(days=3)).fire_at == T0 + timedelta(hours=1)
    berlin = recurring(cron="0 9 * * *", tz=BERLIN)
    assert local(berlin.fire_at, BERLIN) == "2030-01-08 09:00 CET"
    assert berlin.fire_at.utcoffset() == timedelta(0)  # stored in UTC
    assert recurring(cron="  @hourly ").cron == "@hourly"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "kwargs",
    [
        {"cron": "61 * * * *"},
        {"cron": "not a cron"},
        {"cron": ""},
        {"cron": "* * * *"},
        {"cron": "* * * * * *"},  # seconds are not supported
        {"cron": "0 0 30 2 *"},  # never fires
        {"cron": "R * * * *"},  # random: a different grid each occurrence
        {"cron": 5},
        {"cron": "0 * * * *", "tz": "Mars/Olympus_Mons"},
        {"cron": "0 * * * *", "tz": ""},
        {"cron": "0 * * * *", "tz": "../../etc/passwd"},
        {"every": "1h", "tz": "Nowhere"},
        {"every": "1h", "catch_up": "sometimes"},
        {"cron": "0 * * * *", "catch_up": "LATEST"},
        {"every": "0s"},
        {"every": timedelta(0)},
        {"every": timedelta(seconds=-5)},
        {"every": "soon"},
        {"every": "1h", "end_at": T0 + timedelta(hours=1)},  # not after the first occurrence
        {"cron": "0 * * * *", "end_at": T0 + timedelta(minutes=30)},
    ],
)
def test_invalid_schedules_raise_and_write_nothing(
    clock: FakeClock, sink: Callable[..., Recorder], kwargs: dict[str, Any]
) -> None:
    sink()
    with pytest.raises(InvalidSchedule):
        recurring(**kwargs)
    assert not Wake.objects.exists()


@pytest.mark.django_db
def test_naive_start_at_is_refused(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    sink()
    with pytest.raises(InvalidTime):
        recurring(every="1h", start_at=datetime(2030, 1, 8))  # noqa: DTZ001 - naive on purpose
    assert not Wake.objects.exists()


CRON_MESSAGES = [
    ("0 0 9 * * MON", "has 6 fields; a cron expression has 5 fields: minute hour day-of-month month day-of-week"),
    ("0 9 * * MON-FRI 2030", "seconds and years are not supported"),
    ("0 9 * *", "has 4 fields; a cron expression has 5 fields"),
    ("61 * * * *", "the minute field '61' has 61, out of range (0-59)"),
    ("0 25 * * *", "the hour field '25' has 25, out of range (0-23)"),
    ("0 9-30 * * *", "the hour field '9-30' has 30, out of range (0-23)"),
    ("0 0 32 * *", "the day-of-month field '32' has 32, out of range (1-31)"),
    ("0 0 0 * *", "the day-of-month field '0' has 0, out of range (1-31)"),
    ("0 0 1 13 *", "the month field '13' has 13, out of range (1-12 or JAN-DEC)"),
    ("0 0 * * 8", "the day-of-week field '8' has 8, out of range (0-7 or SUN-SAT"),
    ("*/0 * * * *", "the minute field '*/0' has a step of 0"),
    ("0 9 * JANX *", "the month field 'JANX' is not valid: expected a number 1-12 or JAN-DEC, *, a list"),
    ("0 9 * * MON-", "the day-of-week field 'MON-' is not valid"),
    ("1,,2 * * * *", "the minute field '1,,2' is not valid"),
    ("@reboot", "unknown shortcut"),
]


@pytest.mark.parametrize(("cron", "message"), CRON_MESSAGES, ids=[c for c, _ in CRON_MESSAGES])
def test_a_bad_cron_is_refused_in_our_words_naming_what_is_wrong(cron: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        recurrence.preview(cron=cron, tz="UTC", n=1)
    text = str(info.value)
    assert text.startswith(f"cron: {cron!r} ") and message in text, text
    assert "column" not in text and "not acceptable" not in text and "bands" not in text, "no croniter wording"


@pytest.mark.parametrize("cron", ["@daily", "@hourly", "0 9 L * *", "0 9 * * 5#3", "0 9 * * MON-FRI", "5-2 * * * *"])
def test_what_croniter_takes_is_still_taken(cron: str) -> None:
    assert len(recurrence.preview(cron=cron, tz="UTC", n=2)) == 2


def test_invalid_schedule_is_a_wake_error() -> None:
    assert issubclass(InvalidSchedule, django_wakes.WakeError)


# --------------------------------------------------------------------------------------------------
# Chains: rows, drift, endings
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_occurrence_is_its_own_row_linked_by_chain(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = django_wakes.schedule(
        workspace_id="ws-7",
        session_id="s-1",
        kind=KIND,
        serial_key="lane-a",
        intent={"job": "digest"},
        every="1h",
        idempotency_key="digest-chain",
        max_attempts=3,
    )
    drive(clock, first.chain_id, 3)
    rows = chain_rows(first.chain_id)
    assert [r.occurrence for r in rows] == [0, 1, 2, 3]
    assert [r.state for r in rows] == ["fired", "fired", "fired", "pending"]
    assert [r.fire_at for r in rows] == [T0 + timedelta(hours=h) for h in (1, 2, 3, 4)]
    for row in rows:
        assert (row.workspace_id, row.session_id, row.kind, row.serial_key, row.intent) == (
            "ws-7",
            "s-1",
            KIND,
            "lane-a",
            {"job": "digest"},
        )
        assert (row.every, row.catch_up, row.max_attempts, row.chain_id) == (
            timedelta(hours=1),
            "replay",
            3,
            first.chain_id,
        )
    keys = [r.idempotency_key for r in rows]
    assert keys[0] == "digest-chain" and len(set(keys)) == 4
    assert keys[1] == recurrence.chain_key(first.chain_id, T0 + timedelta(hours=2))
    assert [c.pk for c in calls] == [r.pk for r in rows[:3]]
    assert calls[0].result == {"trigger": "at", "slot": (T0 + timedelta(hours=1)).isoformat()}


@pytest.mark.django_db
def test_late_firing_does_not_drift_every(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = recurring(every="1h")
    drive(clock, first.chain_id, 4, late=timedelta(minutes=25))
    assert [c.fire_at for c in calls] == [T0 + timedelta(hours=h) for h in (1, 2, 3, 4)]
    assert pending(first.chain_id).fire_at == T0 + timedelta(hours=5)


@pytest.mark.django_db
def test_late_firing_does_not_drift_cron(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = recurring(cron="*/15 * * * *", catch_up="latest")
    drive(clock, first.chain_id, 3, late=timedelta(minutes=7))
    assert [c.fire_at for c in calls] == [T0 + timedelta(minutes=m) for m in (15, 30, 45)]
    assert all("missed" not in c.result for c in calls)  # late, but within its period
    assert pending(first.chain_id).fire_at == T0 + timedelta(hours=1)


@pytest.mark.django_db
def test_cancel_a_pending_occurrence_ends_the_chain(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = recurring(every="1h")
    drive(clock, first.chain_id, 1)
    live = pending(first.chain_id)
    assert django_wakes.cancel(live.pk) is True
    clock.advance("10h")
    django_wakes.run_due()
    assert len(calls) == 1
    assert pending(first.chain_id) is None
    assert [r.state for r in chain_rows(first.chain_id)] == ["fired", "cancelled"]


@pytest.mark.django_db
def test_cancel_while_firing_ends_the_chain(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    cancelled: list[bool] = []
    calls = sink(then=lambda wake, result: cancelled.append(django_wakes.cancel(wake.pk)))
    first = recurring(every="1h")
    drive(clock, first.chain_id, 1)
    assert cancelled == [True] and len(calls) == 1
    assert [r.state for r in chain_rows(first.chain_id)] == ["fired"]


@pytest.mark.django_db
def test_stop_ends_the_chain(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink(then=lambda wake, result: django_wakes.Stop("done") if wake.occurrence == 1 else None)
    first = recurring(cron="0 * * * *")
    drive(clock, first.chain_id, 2)
    clock.advance("5h")
    django_wakes.run_due()
    assert [c.occurrence for c in calls] == [0, 1]
    assert [r.state for r in chain_rows(first.chain_id)] == ["fired", "fired"]
    assert WakeAttempt.objects.filter(wake_id=calls[1].pk).get().outcome == "stopped"


@pytest.mark.django_db
def test_chain_stops_after_end_at_inclusive(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = recurring(every="1h", end_at=T0 + timedelta(hours=3))
    drive(clock, first.chain_id, 3)
    assert [c.fire_at for c in calls] == [T0 + timedelta(hours=h) for h in (1, 2, 3)]
    assert pending(first.chain_id) is None
    assert all(r.end_at == T0 + timedelta(hours=3) for r in chain_rows(first.chain_id))


@pytest.mark.django_db
def test_a_dead_occurrence_still_books_the_next(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink(then=RuntimeError("boom"))
    first = recurring(every="1h", max_attempts=1)
    drive(clock, first.chain_id, 2)
    rows = chain_rows(first.chain_id)
    assert [r.state for r in rows] == ["dead", "dead", "pending"]
    assert "boom" in rows[0].last_error and len(calls) == 2
    assert rows[2].fire_at == T0 + timedelta(hours=3)


@pytest.mark.django_db
def test_a_retried_occurrence_books_one_successor(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    def fail_once(wake: Wake, result: dict[str, Any]) -> Any:
        if wake.attempts == 1:
            raise RuntimeError("flaky")
        return None

    calls = sink(then=fail_once)
    first = recurring(every="1h")
    drive(clock, first.chain_id, 2)  # attempt 1 fails (backoff), attempt 2 fires
    rows = chain_rows(first.chain_id)
    assert [r.state for r in rows] == ["fired", "pending"]
    assert rows[1].fire_at == T0 + timedelta(hours=2)
    assert calls[0].result == calls[1].result  # a retry stands for the same slot


@pytest.mark.django_db
def test_an_expiry_notice_books_the_next(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = recurring(every="1h", expires_in="30m")  # applies to the first occurrence only
    drive(clock, first.chain_id, 1)
    assert calls[0].result == {"trigger": "at", "expired": True}
    rows = chain_rows(first.chain_id)
    assert [r.state for r in rows] == ["expired", "pending"]
    assert rows[1].fire_at == T0 + timedelta(hours=2) and rows[1].expires_at is None


# --------------------------------------------------------------------------------------------------
# Catch-up after downtime
# --------------------------------------------------------------------------------------------------


def _down_for_three_periods(clock: FakeClock, policy: str) -> Wake:
    first = recurring(every="1h", catch_up=policy)  # slots T0+1h, +2h, +3h, +4h...
    clock.set(T0 + timedelta(hours=3, minutes=30))  # the runners were down: three slots passed
    return first


@pytest.mark.django_db
def test_replay_fires_each_missed_occurrence_in_order_one_per_pass(
    clock: FakeClock, sink: Callable[..., Recorder]
) -> None:
    calls = sink()
    first = _down_for_three_periods(clock, "replay")
    for expected in (1, 2, 3):
        report = django_wakes.run_due()
        assert report.fired == 1
        assert calls[-1].fire_at == T0 + timedelta(hours=expected)
    assert django_wakes.run_due().fired == 0
    assert pending(first.chain_id).fire_at == T0 + timedelta(hours=4)
    assert all("missed" not in c.result for c in calls)


@pytest.mark.django_db
def test_latest_fires_once_for_the_newest_slot_with_the_missed_count(
    clock: FakeClock, sink: Callable[..., Recorder]
) -> None:
    calls = sink()
    first = _down_for_three_periods(clock, "latest")
    assert django_wakes.run_due().fired == 1
    assert django_wakes.run_due().fired == 0
    assert calls[0].result == {"trigger": "at", "slot": (T0 + timedelta(hours=3)).isoformat(), "missed": 2}
    assert calls[0].fire_at == T0 + timedelta(hours=1)  # the row keeps its own (booked) slot
    rows = chain_rows(first.chain_id)
    assert rows[0].result == calls[0].result  # persisted before the sink ran
    assert [r.fire_at for r in rows] == [T0 + timedelta(hours=1), T0 + timedelta(hours=4)]
    drive(clock, first.chain_id, 1)
    assert calls[1].result == {"trigger": "at", "slot": (T0 + timedelta(hours=4)).isoformat()}


@pytest.mark.django_db
def test_skip_fires_none_and_resumes_at_the_next_future_slot(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    calls = sink()
    first = _down_for_three_periods(clock, "skip")
    report = django_wakes.run_due()
    assert (report.fired, report.claimed, calls) == (0, 0, [])
    rows = chain_rows(first.chain_id)
    assert [r.state for r in rows] == ["cancelled", "pending"]
    assert rows[0].result == {
        "trigger": "at",
        "slot": (T0 + timedelta(hours=1)).isoformat(),
        "skipped": True,
        "missed": 3,
    }
    assert not WakeAttempt.objects.exists()
    assert rows[1].fire_at == T0 + timedelta(hours=4)
    drive(clock, first.chain_id, 1)
    assert [c.fire_at for c in calls] == [T0 + timedelta(hours=4)]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("policy", "fired", "states"),
    [
        ("latest", 1, ["fired"]),
        ("skip", 0, ["cancelled"]),
        ("replay", 1, ["fired", "pending"]),
    ],
)
def test_catch_up_never_reaches_past_end_at(
    clock: FakeClock, sink: Callable[..., Recorder], policy: str, fired: int, states: list[str]
) -> None:
    calls = sink()
    first = recurring(every="1h", catch_up=policy, end_at=T0 + timedelta(hours=2))
    clock.set(T0 + timedelta(hours=5, minutes=30))  # down past the end of the chain
    assert django_wakes.run_due().fired == fired
    assert [r.state for r in chain_rows(first.chain_id)] == states
    if policy == "latest":
        assert calls[0].result == {"trigger": "at", "slot": (T0 + timedelta(hours=2)).isoformat(), "missed": 1}
    if policy == "skip":
        assert chain_rows(first.chain_id)[0].result["missed"] == 2


@pytest.mark.django_db
def test_tz_defaults_to_settings_time_zone(clock: FakeClock, sink: Callable[..., Recorder], settings: Any) -> None:
    sink()
    settings.TIME_ZONE = NEW_YORK
    wake = recurring(cron="0 9 * * *")
    assert wake.tz == NEW_YORK and local(wake.fire_at, NEW_YORK) == "2030-01-07 09:00 EST"  # 12:00Z is 07:00 EST


@pytest.mark.django_db
@pytest.mark.parametrize("policy", ["latest", "skip"])
def test_late_within_one_period_fires_normally(clock: FakeClock, sink: Callable[..., Recorder], policy: str) -> None:
    calls = sink()
    first = recurring(every="1h", catch_up=policy)
    clock.set(T0 + timedelta(minutes=119))  # an hour late, but the next slot has not come
    assert django_wakes.run_due().fired == 1
    assert calls[0].result == {"trigger": "at", "slot": (T0 + timedelta(hours=1)).isoformat()}
    assert pending(first.chain_id).fire_at == T0 + timedelta(hours=2)


@pytest.mark.django_db
def test_skip_settles_a_slow_sinks_missed_slots_at_book_time(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    def slow(wake: Wake, result: dict[str, Any]) -> None:
        clock.advance("150m")  # the sink ran past two more slots

    sink(then=slow)
    first = recurring(every="1h", catch_up="skip")
    drive(clock, first.chain_id, 1)
    assert pending(first.chain_id).fire_at == T0 + timedelta(hours=4)


def _run_after_downtime(clock: FakeClock, policy: str, missed: int, **schedule: Any) -> tuple[int, Wake]:
    """Schedule, let ``missed`` + 1 slots pass, run one pass; return (queries, first row)."""
    Wake.objects.all().delete()
    first = recurring(catch_up=policy, **schedule)
    grid = recurrence.grid_for(first)
    newest = first.fire_at
    for _ in range(missed):  # the test may walk the missed slots; the engine must not
        newest = grid.next_after(newest)
    clock.set(newest + timedelta(seconds=30))
    with CaptureQueriesContext(connection) as ctx:
        report = django_wakes.run_due()
    assert report.fired == (1 if policy == "latest" else 0)
    return len(ctx.captured_queries), first


@pytest.mark.django_db
@pytest.mark.parametrize("policy", ["latest", "skip"])
@pytest.mark.parametrize(
    "schedule",
    [{"every": "1m"}, {"cron": "* * * * *"}, {"cron": "0 * * * *", "tz": BERLIN}],
    ids=["every", "cron-minutely", "cron-hourly-berlin-across-dst"],
)
def test_a_thousand_missed_occurrences_settle_in_one_pass_with_constant_queries(
    sink: Callable[..., Recorder], policy: str, schedule: dict[str, Any]
) -> None:
    calls = sink()
    # Starting 2025-10-01 the hourly Berlin chain's 1,000 missed hours span the fall-back night.
    with fake_clock(datetime(2025, 10, 1, tzinfo=UTC)) as clock:
        few, _ = _run_after_downtime(clock, policy, 5, **schedule)
        calls.clear()
        clock.set(datetime(2025, 10, 1, tzinfo=UTC))
        many, first = _run_after_downtime(clock, policy, 1000, **schedule)
    assert many == few and many <= 25, (few, many)
    rows = chain_rows(first.chain_id)
    assert len(rows) == 2 and rows[1].state == "pending" and rows[1].fire_at > clock.now()
    if policy == "latest":
        assert calls[0].result["missed"] == 1000 and rows[0].state == "fired"
        assert datetime.fromisoformat(calls[0].result["slot"]) == clock.now() - timedelta(seconds=30)
    else:
        assert calls == [] and rows[0].state == "cancelled" and rows[0].result["missed"] == 1001


# --------------------------------------------------------------------------------------------------
# Atomicity and idempotency of booking
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_settle_and_booking_commit_together(
    clock: FakeClock, sink: Callable[..., Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = sink()
    first = recurring(every="1h")

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("process died between settle and booking")

    monkeypatch.setattr(recurrence, "occurrence_fields", crash)
    clock.set(first.fire_at)
    with pytest.raises(RuntimeError):
        django_wakes.run_due()
    row = Wake.objects.get(pk=first.pk)
    assert row.state == "firing" and not WakeAttempt.objects.filter(outcome="fired").exists()
    assert Wake.objects.count() == 1  # neither the settle nor the booking happened
    monkeypatch.undo()
    clock.advance("6m")  # the lease lapses; another pass re-drives the occurrence
    django_wakes.run_due()
    rows = chain_rows(first.chain_id)
    assert [r.state for r in rows] == ["fired", "pending"] and len(calls) == 2
    assert rows[1].fire_at == T0 + timedelta(hours=2)


@pytest.mark.django_db
def test_a_replayed_book_next_does_not_double_book(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    sink()
    first = recurring(cron="*/5 * * * *")
    one = engine.book_next(first, T0)
    two = engine.book_next(first, T0)
    assert one is not None and two is not None and one.pk == two.pk
    assert Wake.objects.filter(chain_id=first.chain_id).count() == 2
    assert one.fire_at == T0 + timedelta(minutes=10) and one.occurrence == 1


@pytest.mark.django_db
def test_book_next_is_a_no_op_for_one_shot_wakes(clock: FakeClock, sink: Callable[..., Recorder]) -> None:
    sink()
    once = django_wakes.schedule(workspace_id="ws", kind=KIND, delay="5m")
    assert engine.book_next(once, T0) is None


# --------------------------------------------------------------------------------------------------
# DST, through the engine: times stored in UTC, fired in local wall time
# --------------------------------------------------------------------------------------------------


def _fire_chain(cron: str, tz: str, start: datetime, times: int, sink: Callable[..., Recorder]) -> list[str]:
    calls = sink()
    with fake_clock(start) as clock:
        first = recurring(cron=cron, tz=tz)
        drive(clock, first.chain_id, times)
        django_wakes.cancel(pending(first.chain_id).pk)  # so a later chain in the test runs alone
    for row in chain_rows(first.chain_id):
        assert row.fire_at.utcoffset() == timedelta(0)
    return [f"{s:%m-%d %H:%M}Z={local(s, tz)[5:]}" for s in calls.slots]


@pytest.mark.django_db
def test_dst_daily_0230_berlin_spring_forward_and_fall_back(sink: Callable[..., Recorder]) -> None:
    spring = _fire_chain("30 2 * * *", BERLIN, datetime(2025, 3, 28, 12, tzinfo=UTC), 3, sink)
    # 02:30 does not exist on 30 March: it fires once, at the first valid instant after the gap.
    assert spring == ["03-29 01:30Z=03-29 02:30 CET", "03-30 01:00Z=03-30 03:00 CEST", "03-31 00:30Z=03-31 02:30 CEST"]
    fall = _fire_chain("30 2 * * *", BERLIN, datetime(2025, 10, 25, 12, tzinfo=UTC), 2, sink)
    # 02:30 happens twice on 26 October: a fixed-hour job fires once, at the first one.
    assert fall == ["10-26 00:30Z=10-26 02:30 CEST", "10-27 01:30Z=10-27 02:30 CET"]


@pytest.mark.django_db
def test_dst_daily_new_york_spring_forward_and_fall_back(sink: Callable[..., Recorder]) -> None:
    spring = _fire_chain("30 2 * * *", NEW_YORK, datetime(2025, 3, 8, 12, tzinfo=UTC), 2, sink)
    assert spring == ["03-09 07:00Z=03-09 03:00 EDT", "03-10 06:30Z=03-10 02:30 EDT"]
    fall = _fire_chain("30 1 * * *", NEW_YORK, datetime(2025, 11, 1, 12, tzinfo=UTC), 2, sink)
    assert fall == ["11-02 05:30Z=11-02 01:30 EDT", "11-03 06:30Z=11-03 01:30 EST"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tz", "start", "expected"),
    [
        (
            BERLIN,
            datetime(2025, 10, 25, 23, 30, tzinfo=UTC),
            ["00:00Z=02:00 CEST", "01:00Z=02:00 CET", "02:00Z=03:00 CET", "03:00Z=04:00 CET"],
        ),
        (
            NEW_YORK,
            datetime(2025, 11, 2, 4, 30, tzinfo=UTC),
            ["05:00Z=01:00 EDT", "06:00Z=01:00 EST", "07:00Z=02:00 EST", "08:00Z=03:00 EST"],
        ),
    ],
)
def test_dst_hourly_fires_every_real_hour_across_fall_back(
    sink: Callable[..., Recorder], tz: str, start: datetime, expected: list[str]
) -> None:
    fired = _fire_chain("0 * * * *", tz, start, 4, sink)
    assert [f[6:12] + "=" + f.split(" ", 2)[2] for f in fired] == expected


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tz", "start", "utc_hours"),
    [
        (BERLIN, datetime(2025, 3, 27, 12, tzinfo=UTC), [8, 8, 7, 7]),  # changes on 30 March
        (BERLIN, datetime(2025, 10, 23, 12, tzinfo=UTC), [7, 7, 8, 8]),  # changes on 26 October
        (NEW_YORK, datetime(2025, 3, 6, 15, tzinfo=UTC), [14, 14, 13, 13]),  # changes on 9 March
        (NEW_YORK, datetime(2025, 10, 30, 15, tzinfo=UTC), [13, 13, 14, 14]),  # changes on 2 November
    ],
)
def test_dst_0900_stays_at_nine_local(
    sink: Callable[..., Recorder], tz: str, start: datetime, utc_hours: list[int]
) -> None:
    fired = _fire_chain("0 9 * * *", tz, start, 4, sink)
    assert [int(f[6:8]) for f in fired] == utc_hours
    days = [datetime.strptime(f"2025-{f[:5]}", "%Y-%m-%d").date() for f in fired]
    assert days == [days[0] + timedelta(days=i) for i in range(4)]  # one firing a day, none skipped
    assert all(f.endswith(("09:00 CET", "09:00 CEST", "09:00 EST", "09:00 EDT")) for f in fired)


# --------------------------------------------------------------------------------------------------
# The cron grid itself
# --------------------------------------------------------------------------------------------------


def _walk(grid: CronGrid, start: datetime, times: int) -> list[datetime]:
    out, moment = [], start
    for _ in range(times):
        moment = grid.next_after(moment)
        out.append(moment)
    return out


@pytest.mark.parametrize("tz", [BERLIN, NEW_YORK])
def test_grid_hourly_has_no_gap_and_no_double_around_either_change(tz: str) -> None:
    grid = CronGrid("0 * * * *", tz)
    for start in (datetime(2025, 3, 8, tzinfo=UTC), datetime(2025, 10, 25, tzinfo=UTC)):
        slots = _walk(grid, start, 24 * 10)  # ten days, both changes of the year are covered by one
        assert all(b - a == timedelta(hours=1) for a, b in zip(slots, slots[1:], strict=False))


def test_grid_collapses_slots_mapped_into_one_gap() -> None:
    grid = CronGrid("0,30 2 * * *", NEW_YORK)
    slots = _walk(grid, datetime(2025, 3, 8, 12, tzinfo=UTC), 4)
    assert [local(s, NEW_YORK)[5:] for s in slots] == [
        "03-09 03:00 EDT",
        "03-10 02:00 EDT",
        "03-10 02:30 EDT",
        "03-11 02:00 EDT",
    ]


def test_grid_quarter_hours_in_the_repeated_hour_fire_twice_when_hour_is_wildcard() -> None:
    every_hour = CronGrid("*/30 * * * *", NEW_YORK)
    fixed_hour = CronGrid("*/30 1 * * *", NEW_YORK)
    start = datetime(2025, 11, 2, 4, 45, tzinfo=UTC)  # 00:45 EDT
    assert [local(s, NEW_YORK)[11:] for s in _walk(every_hour, start, 5)] == [
        "01:00 EDT",
        "01:30 EDT",
        "01:00 EST",
        "01:30 EST",
        "02:00 EST",
    ]
    assert [local(s, NEW_YORK)[5:] for s in _walk(fixed_hour, start, 3)] == [
        "11-02 01:00 EDT",
        "11-02 01:30 EDT",
        "11-03 01:00 EST",
    ]


def test_grid_latest_at_or_before_mirrors_next_after() -> None:
    grid = CronGrid("*/20 * * * *", BERLIN)
    slots = _walk(grid, datetime(2025, 10, 25, 23, tzinfo=UTC), 12)
    for earlier, later in zip(slots, slots[1:], strict=False):
        assert grid.latest_at_or_before(later) == later
        assert grid.latest_at_or_before(later - timedelta(seconds=1)) == earlier


@pytest.mark.parametrize("tz", [BERLIN, NEW_YORK, "UTC", "Australia/Lord_Howe", "America/Santiago", "Europe/Dublin"])
@pytest.mark.parametrize(
    "cron", ["0 * * * *", "*/20 * * * *", "30 2 * * *", "30 1 * * *", "0 9 * * 1-5", "0,30 2 * * *", "0 0 L * *"]
)
def test_grid_count_matches_enumeration_across_dst(tz: str, cron: str) -> None:
    grid = CronGrid(cron, tz)
    rng = random.Random(f"{tz}{cron}")
    changes = [datetime(2025, m, d, tzinfo=UTC) for m, d in ((3, 9), (3, 30), (4, 5), (9, 6), (10, 26), (11, 2))]
    for _ in range(4):
        after = rng.choice(changes) + timedelta(minutes=rng.randint(-3000, 3000), seconds=rng.choice((0, 17)))
        until = after + timedelta(minutes=rng.randint(0, 6000))
        enumerated, moment = 0, after
        while (moment := grid.next_after(moment)) <= until:
            enumerated += 1
        assert grid.count(after, until) == enumerated, (after, until)


def test_every_grid_is_arithmetic() -> None:
    grid = EveryGrid(timedelta(minutes=7), T0)
    assert grid.next_after(T0) == T0 + timedelta(minutes=7)
    assert grid.next_after(T0 - timedelta(minutes=1)) == T0
    assert grid.latest_at_or_before(T0 + timedelta(minutes=20)) == T0 + timedelta(minutes=14)
    assert grid.count(T0, T0 + timedelta(minutes=7000)) == 1000
    assert grid.count(T0 + timedelta(minutes=5), T0) == 0
