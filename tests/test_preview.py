"""A schedule's next fire times: ``django_wakes.preview(...)`` and ``manage.py wakes preview``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import django_wakes
from django_wakes.exceptions import InvalidSchedule, InvalidTime, InvalidWake
from django_wakes.testing import fake_clock

PARIS = "Europe/Paris"
BEFORE_SPRING = datetime(2026, 3, 25, 12, tzinfo=UTC)  # Paris changes on Sunday 29 March 2026


def test_weekday_mornings_in_paris_across_spring_forward() -> None:
    shown = django_wakes.preview(cron="0 9 * * MON-FRI", tz=PARIS, n=10, start=BEFORE_SPRING)
    assert len(shown) == 10
    assert all(o.local.hour == 9 and o.local.minute == 0 and o.local.weekday() < 5 for o in shown)
    assert [o.at.hour for o in shown] == [8, 8] + [7] * 8  # 09:00 CET, then 09:00 CEST
    assert shown[0].at == datetime(2026, 3, 26, 8, tzinfo=UTC)  # strictly after the start
    marked = [o for o in shown if o.changes]
    assert len(marked) == 1 and marked[0].local.date().isoformat() == "2026-03-30"
    assert marked[0].changes == ("2026-03-29: clocks go forward 02:00 → 03:00 (CET → CEST)",)
    assert not any(o.note for o in shown)  # 09:00 itself is never moved


def test_the_preview_shows_what_the_policy_does_to_0230() -> None:
    spring = django_wakes.preview(cron="30 2 * * *", tz=PARIS, n=2, start=datetime(2026, 3, 28, 12, tzinfo=UTC))
    assert spring[0].local.isoformat() == "2026-03-29T03:00:00+02:00"
    assert spring[0].note == "moved to 03:00: 02:30 not on the clock"
    assert "02:30 not on the clock: fire at 03:00" in spring[0].changes[0]
    skipped = django_wakes.preview(
        cron="30 2 * * *", tz=PARIS, n=1, start=datetime(2026, 3, 28, 12, tzinfo=UTC), dst="missing=skip"
    )
    assert skipped[0].local.isoformat() == "2026-03-30T02:30:00+02:00"
    assert "02:30 not on the clock: skipped" in skipped[0].changes[0]
    both = django_wakes.preview(
        cron="30 2 * * *", tz=PARIS, n=2, start=datetime(2026, 10, 24, 12, tzinfo=UTC), dst={"ambiguous": "both"}
    )
    assert [o.note for o in both] == ["repeated 02:30: the first one (CEST)", "repeated 02:30: the second one (CET)"]
    assert both[1].changes == ("2026-10-25: clocks go back 03:00 → 02:00 (CEST → CET)",)


def test_every_counts_elapsed_time_and_marks_the_change() -> None:
    start = datetime(2025, 11, 2, 3, 30, tzinfo=UTC)  # 23:30 EDT; New York falls back at 06:00Z
    shown = django_wakes.preview(every="90m", tz="America/New_York", n=3, start=start)
    assert [o.at for o in shown] == [start + k * timedelta(minutes=90) for k in (1, 2, 3)]
    assert [o.local.strftime("%H:%M %Z") for o in shown] == ["01:00 EDT", "01:30 EST", "03:00 EST"]
    assert shown[0].note == "repeated 01:00: the first one (EDT)" and not shown[0].changes
    assert shown[1].changes == ("2025-11-02: clocks go back 02:00 → 01:00 (EDT → EST)",)
    assert shown[1].note == "repeated 01:30: the second one (EST)"
    assert not shown[2].marked


def test_the_start_defaults_to_now() -> None:
    with fake_clock(BEFORE_SPRING):
        shown = django_wakes.preview(every="1h", n=2)
    assert [o.at for o in shown] == [BEFORE_SPRING + timedelta(hours=1), BEFORE_SPRING + timedelta(hours=2)]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"cron": "61 * * * *"}, "not a valid cron expression"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 9 * * *", "every": "1h"}, "exactly one of cron or every"),
        ({}, "exactly one of cron or every"),
        ({"every": "0s"}, "every"),
        ({"cron": "0 9 * * *", "n": 0}, "n: expected a whole number"),
        ({"cron": "0 9 * * *", "n": 10_000}, "n: expected a whole number"),
        ({"every": "1h", "dst": "missing=skip"}, "applies only to cron"),
    ],
)
def test_bad_previews_raise_a_schedule_error(arguments: dict[str, object], error: str) -> None:
    with pytest.raises(InvalidSchedule, match=error):
        django_wakes.preview(**arguments)  # type: ignore[arg-type]


def test_a_naive_start_is_refused() -> None:
    with pytest.raises(InvalidTime):
        django_wakes.preview(cron="0 9 * * *", start=datetime(2026, 3, 25))
    assert issubclass(InvalidSchedule, InvalidWake)


def run(*args: str) -> str:
    out = StringIO()
    call_command("wakes", "preview", *args, stdout=out)
    return out.getvalue()


def test_the_command_prints_local_time_utc_and_dst_markers() -> None:
    text = run("0 9 * * MON-FRI", "--tz", PARIS, "-n", "10", "--start", "2026-03-25T12:00")
    lines = text.splitlines()
    assert lines[0] == "Next 10 fire times of cron '0 9 * * MON-FRI' in Europe/Paris"
    assert "DST policy: repeated hour:" in lines[1]
    rows = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(rows) == 10
    assert rows[0].split() == ["1", "Thu", "2026-03-26", "09:00:00", "CET", "2026-03-26", "08:00:00Z"]
    assert rows[2].split()[1:5] == ["Mon", "2026-03-30", "09:00:00", "CEST"]
    change = lines.index(rows[2]) - 1
    assert lines[change].split() == [
        "DST",
        "2026-03-29:",
        "clocks",
        "go",
        "forward",
        "02:00",
        "→",
        "03:00",
        "(CET",
        "→",
        "CEST)",
    ]


def test_the_command_previews_every_and_a_dst_policy() -> None:
    text = run("--every", "90m", "--tz", "America/New_York", "-n", "3", "--start", "2025-11-01T23:30")
    assert "Next 3 fire times of every 90m in America/New_York" in text
    assert "2025-11-02 01:30:00 EST" in text and "DST: repeated 01:30: the second one (EST)" in text
    skipped = run("30 2 * * *", "--tz", PARIS, "-n", "2", "--start", "2026-03-28", "--dst", "missing=skip")
    assert "skipped hour: skipped" in skipped and "2026-03-30 02:30:00 CEST" in skipped


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["61 * * * *"], "not a valid cron expression"),
        (["0 * * * *", "--tz", "Mars/Olympus"], "unknown time zone"),
        (["0 * * * *", "--dst", "sometimes"], "dst"),
        (["0 * * * *", "--start", "yesterday"], "--start"),
        (["0 * * * *", "-n", "0"], "n: expected a whole number"),
        ([], "exactly one of cron or every"),
    ],
)
def test_the_command_turns_bad_input_into_a_command_error(args: list[str], error: str) -> None:
    with pytest.raises(CommandError, match=error):
        run(*args)
