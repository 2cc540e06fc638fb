"""A chain's DST policy (``schedule(dst=...)``), fired across real transitions.

Europe/Paris (02:00→03:00 on 2025-03-30, 03:00→02:00 on 2025-10-26) and America/New_York
(02:00→03:00 on 2025-03-09, 02:00→01:00 on 2025-11-02). Each test creates the chain before the change
and fires its occurrences one by one through ``run_due`` under a fake clock, so the policy is read back
from the rows the engine booked, not from a grid built in the test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import django_wakes
from django_wakes.exceptions import InvalidSchedule, InvalidWake
from django_wakes.models import State, Wake
from django_wakes.schedules import recurrence
from django_wakes.schedules.recurrence import CronGrid, DstPolicy
from django_wakes.testing import fake_clock

KIND = "test.dst"
PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


@pytest.fixture(autouse=True)
def calls(sinks: Any) -> Any:
    return sinks(KIND)


def fire(cron: str, tz: str, start: datetime, times: int, dst: Any = None) -> list[str]:
    """Create the chain at ``start``, fire ``times`` occurrences; return ``"MM-DD HH:MMZ=HH:MM ZONE"`` each."""
    fired: list[str] = []
    with fake_clock(start) as clock:
        first = django_wakes.schedule(workspace_id="w", kind=KIND, cron=cron, tz=tz, dst=dst)
        for _ in range(times):
            (due,) = Wake.objects.filter(chain_id=first.chain_id, state=State.PENDING)
            clock.set(due.due_at)
            assert django_wakes.run_due().fired == 1
            slot = datetime.fromisoformat(Wake.objects.get(pk=due.pk).result["slot"])
            local = slot.astimezone(ZoneInfo(tz))
            fired.append(f"{slot:%m-%d %H:%M}Z={local:%H:%M} {local.tzname()}")
        rows = Wake.objects.filter(chain_id=first.chain_id)
        policy = recurrence.dst_policy(dst)
        assert {(r.dst_ambiguous, r.dst_missing) for r in rows} == {(policy.ambiguous, policy.missing)}  # carried
        Wake.objects.filter(chain_id=first.chain_id, state=State.PENDING).update(state=State.CANCELLED)
    return fired


SPRING_PARIS = datetime(2025, 3, 28, 12, tzinfo=UTC)
FALL_PARIS = datetime(2025, 10, 25, 12, tzinfo=UTC)
SPRING_NY = datetime(2025, 3, 8, 12, tzinfo=UTC)
FALL_NY = datetime(2025, 11, 1, 12, tzinfo=UTC)


@pytest.mark.django_db
def test_default_is_todays_rule_at_0230_in_paris() -> None:
    assert fire("30 2 * * *", PARIS, SPRING_PARIS, 3) == [
        "03-29 01:30Z=02:30 CET",
        "03-30 01:00Z=03:00 CEST",  # 02:30 does not exist: at the change
        "03-31 00:30Z=02:30 CEST",
    ]
    assert fire("30 2 * * *", PARIS, FALL_PARIS, 2) == ["10-26 00:30Z=02:30 CEST", "10-27 01:30Z=02:30 CET"]


@pytest.mark.django_db
def test_missing_skip_drops_the_0230_that_never_comes() -> None:
    assert fire("30 2 * * *", PARIS, SPRING_PARIS, 3, dst={"missing": "skip"}) == [
        "03-29 01:30Z=02:30 CET",
        "03-31 00:30Z=02:30 CEST",
        "04-01 00:30Z=02:30 CEST",
    ]
    assert fire("30 2 * * *", NEW_YORK, SPRING_NY, 2, dst="missing=skip") == [
        "03-10 06:30Z=02:30 EDT",
        "03-11 06:30Z=02:30 EDT",
    ]
    assert fire("30 2 * * *", NEW_YORK, SPRING_NY, 1) == ["03-09 07:00Z=03:00 EDT"]  # the default shifts


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ambiguous", "expected"),
    [
        ("auto", ["10-26 00:30Z=02:30 CEST", "10-27 01:30Z=02:30 CET"]),
        ("first", ["10-26 00:30Z=02:30 CEST", "10-27 01:30Z=02:30 CET"]),
        ("second", ["10-26 01:30Z=02:30 CET", "10-27 01:30Z=02:30 CET"]),
        ("both", ["10-26 00:30Z=02:30 CEST", "10-26 01:30Z=02:30 CET", "10-27 01:30Z=02:30 CET"]),
    ],
)
def test_ambiguous_0230_in_paris(ambiguous: str, expected: list[str]) -> None:
    assert fire("30 2 * * *", PARIS, FALL_PARIS, len(expected), dst={"ambiguous": ambiguous}) == expected


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ambiguous", "expected"),
    [
        ("first", ["11-02 05:30Z=01:30 EDT", "11-03 06:30Z=01:30 EST"]),
        ("second", ["11-02 06:30Z=01:30 EST", "11-03 06:30Z=01:30 EST"]),
        ("both", ["11-02 05:30Z=01:30 EDT", "11-02 06:30Z=01:30 EST", "11-03 06:30Z=01:30 EST"]),
    ],
)
def test_ambiguous_0130_in_new_york(ambiguous: str, expected: list[str]) -> None:
    assert fire("30 1 * * *", NEW_YORK, FALL_NY, len(expected), dst={"ambiguous": ambiguous}) == expected


@pytest.mark.django_db
@pytest.mark.parametrize("ambiguous", ["auto", "first", "second", "both"])
def test_0230_is_not_repeated_in_new_york_so_no_policy_changes_it(ambiguous: str) -> None:
    # New York repeats 01:00-02:00; 02:30 on 2 November exists once.
    assert fire("30 2 * * *", NEW_YORK, FALL_NY, 2, dst={"ambiguous": ambiguous}) == [
        "11-02 07:30Z=02:30 EST",
        "11-03 07:30Z=02:30 EST",
    ]


@pytest.mark.django_db
def test_an_hourly_chain_with_ambiguous_first_fires_the_repeated_hour_once() -> None:
    start = datetime(2025, 11, 2, 4, 30, tzinfo=UTC)
    assert fire("0 * * * *", NEW_YORK, start, 4) == [  # auto: every real hour
        "11-02 05:00Z=01:00 EDT",
        "11-02 06:00Z=01:00 EST",
        "11-02 07:00Z=02:00 EST",
        "11-02 08:00Z=03:00 EST",
    ]
    assert fire("0 * * * *", NEW_YORK, start, 3, dst={"ambiguous": "first"}) == [
        "11-02 05:00Z=01:00 EDT",
        "11-02 07:00Z=02:00 EST",
        "11-02 08:00Z=03:00 EST",
    ]


@pytest.mark.django_db
def test_half_hourly_across_spring_forward_shift_or_skip() -> None:
    start = datetime(2025, 3, 29, 23, 45, tzinfo=UTC)
    assert fire("30 * * * *", PARIS, start, 3) == [
        "03-30 00:30Z=01:30 CET",
        "03-30 01:00Z=03:00 CEST",  # 02:30 moved onto the change
        "03-30 01:30Z=03:30 CEST",
    ]
    assert fire("30 * * * *", PARIS, start, 2, dst={"missing": "skip"}) == [
        "03-30 00:30Z=01:30 CET",
        "03-30 01:30Z=03:30 CEST",
    ]


@pytest.mark.django_db
def test_catch_up_counts_missed_slots_under_the_policy(calls: Any) -> None:
    with fake_clock(FALL_NY) as clock:
        first = django_wakes.schedule(
            workspace_id="w", kind=KIND, cron="30 1 * * *", tz=NEW_YORK, catch_up="latest", dst="ambiguous=both"
        )
        clock.set(datetime(2025, 11, 3, 12, tzinfo=UTC))  # down across both 01:30s and the next day's
        django_wakes.run_due()
    first.refresh_from_db()
    assert first.result == {"trigger": "at", "slot": "2025-11-03T06:30:00+00:00", "missed": 2}


@pytest.mark.django_db
def test_a_schedule_that_only_names_skipped_times_is_refused() -> None:
    # The last Sunday of March at 02:30 never exists in Paris: with missing=skip it would never fire.
    with fake_clock(datetime(2025, 1, 1, tzinfo=UTC)):
        with pytest.raises(InvalidSchedule, match="never fires"):
            django_wakes.schedule(workspace_id="w", kind=KIND, cron="30 2 * 3 L0", tz=PARIS, dst="missing=skip")
        assert django_wakes.schedule(workspace_id="w", kind=KIND, cron="30 2 * 3 L0", tz=PARIS).due_at == datetime(
            2025, 3, 30, 1, tzinfo=UTC
        )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"cron": "0 9 * * *", "dst": {"ambiguous": "twice"}}, "ambiguous must be one of"),
        ({"cron": "0 9 * * *", "dst": {"missing": "later"}}, "missing must be one of"),
        ({"cron": "0 9 * * *", "dst": {"fold": "first"}}, "unknown key"),
        ({"cron": "0 9 * * *", "dst": "ambiguous"}, "expected 'ambiguous=...,missing=...'"),
        ({"cron": "0 9 * * *", "dst": "ambiguous=first,ambiguous=both"}, "expected"),
        ({"cron": "0 9 * * *", "dst": 3}, "expected a DstPolicy"),
        ({"every": "1h", "dst": {"missing": "skip"}}, "applies only to cron"),
        ({"delay": "1h", "dst": {"missing": "skip"}}, "apply only to cron or every"),
    ],
)
def test_bad_dst_policies_are_refused_and_write_nothing(arguments: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidWake, match=error):
        django_wakes.schedule(workspace_id="w", kind=KIND, **arguments)
    assert not Wake.objects.exists()


@pytest.mark.django_db
def test_rows_from_before_the_policy_keep_todays_rule() -> None:
    with fake_clock(FALL_PARIS):
        first = django_wakes.schedule(workspace_id="w", kind=KIND, cron="30 2 * * *", tz=PARIS)
    Wake.objects.filter(pk=first.pk).update(dst_ambiguous="", dst_missing="")  # as migrated rows are
    first.refresh_from_db()
    assert recurrence.grid_for(first) == CronGrid("30 2 * * *", PARIS)
    assert DstPolicy.of(first) == DstPolicy()


POLICIES = [DstPolicy(a, m) for a in ("auto", "first", "second", "both") for m in ("shift", "skip")]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.ambiguous}-{p.missing}")
@pytest.mark.parametrize("tz", [PARIS, NEW_YORK])
@pytest.mark.parametrize("cron", ["30 2 * * *", "30 1 * * *", "*/20 * * * *", "0,30 2 * * *"])
def test_grid_count_and_walks_agree_under_every_policy(policy: DstPolicy, tz: str, cron: str) -> None:
    grid = CronGrid(cron, tz, policy)
    # Four days around each change of 2025: New York 9 March, Paris 30 March, Paris 26 October, New York 2 November.
    for start in (datetime(2025, m, d, tzinfo=UTC) for m, d in ((3, 7), (3, 28), (10, 24), (10, 31))):
        end = start + timedelta(days=4)
        slots, moment = [], start
        while (moment := grid.next_after(moment)) is not None and moment <= end:
            slots.append(moment)
        assert slots == sorted(set(slots))  # strictly increasing: never twice, never backwards
        assert grid.count(start, end) == len(slots)
        for earlier, later in zip(slots, slots[1:], strict=False):
            assert grid.latest_at_or_before(later - timedelta(microseconds=1)) == earlier
            assert grid.next_after(earlier) == later
