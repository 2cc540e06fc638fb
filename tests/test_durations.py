"""Duration strings, points in time and the settings view (no database)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_wakes.conf import wakes_settings
from django_wakes.durations import parse_duration
from django_wakes.exceptions import InvalidDuration, InvalidTime, WakeError
from django_wakes.testing import fake_clock
from django_wakes.timeutil import to_datetime


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("3d", timedelta(days=3)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("2w", timedelta(weeks=2)),
        ("250ms", timedelta(milliseconds=250)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        (" 1H 30M ", timedelta(hours=1, minutes=30)),
        ("0s", timedelta(0)),
    ],
)
def test_parses_compact_duration_strings(text, expected):
    assert parse_duration(text) == expected


def test_timedelta_passes_through_unchanged():
    assert parse_duration(timedelta(minutes=7)) == timedelta(minutes=7)


@pytest.mark.parametrize(
    "bad",
    ["", "   ", "soon", "90", "s", "5 minutes", "1h30", "-5m", "5x", "1e3s", "1h-30m", "m5", "1..5h", "∞s"],
)
def test_unparseable_strings_raise_invalid_duration_naming_the_argument(bad):
    with pytest.raises(InvalidDuration, match="delay"):
        parse_duration(bad, name="delay")


@pytest.mark.parametrize("bad", [90, 1.5, None, True, False, [1], {"s": 1}])
def test_non_string_non_timedelta_is_refused(bad):
    with pytest.raises(InvalidDuration):
        parse_duration(bad, name="delay")


def test_negative_timedelta_is_refused():
    with pytest.raises(InvalidDuration, match="non-negative"):
        parse_duration(timedelta(seconds=-1), name="delay")


def test_zero_is_refused_where_a_positive_duration_is_needed():
    with pytest.raises(InvalidDuration, match="positive"):
        parse_duration("0s", name="LEASE", allow_zero=False)
    with pytest.raises(InvalidDuration):
        parse_duration(timedelta(0), name="LEASE", allow_zero=False)


@pytest.mark.parametrize("huge", ["9" * 400 + "s", "99999999999999999999d", "1000000000d"])
def test_absurdly_large_durations_are_a_wake_error_not_an_overflow(huge):
    with pytest.raises(InvalidDuration):
        parse_duration(huge, name="delay")


def test_invalid_duration_is_a_wake_error_and_a_value_error():
    assert issubclass(InvalidDuration, WakeError)
    assert issubclass(InvalidDuration, ValueError)


def test_aware_datetime_is_normalised_to_utc():
    moment = datetime(2030, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    result = to_datetime(moment, name="at")
    assert result == datetime(2030, 6, 1, 10, 0, tzinfo=UTC)
    assert result.utcoffset() == timedelta(0)


def test_epoch_milliseconds_are_accepted_as_int_and_float():
    assert to_datetime(1_900_000_000_000, name="at") == datetime.fromtimestamp(1_900_000_000, tz=UTC)
    assert to_datetime(1_900_000_000_500.0, name="at") == datetime.fromtimestamp(1_900_000_000.5, tz=UTC)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_epoch_ms_is_refused(bad):
    with pytest.raises(InvalidTime, match="at"):
        to_datetime(bad, name="at")


@pytest.mark.parametrize("bad", [10**20, -(10**20)])
def test_out_of_range_epoch_ms_is_refused(bad):
    with pytest.raises(InvalidTime, match="out of range"):
        to_datetime(bad, name="at")


def test_naive_datetime_is_refused_not_guessed():
    with pytest.raises(InvalidTime, match="naive"):
        to_datetime(datetime(2030, 1, 1, 12, 0), name="at")


@pytest.mark.parametrize("bad", ["2030-01-01T00:00:00Z", None, True, object()])
def test_other_types_are_refused(bad):
    with pytest.raises(InvalidTime):
        to_datetime(bad, name="at")


def test_fake_clock_advances_and_sets_and_restores_the_real_clock():
    from django_wakes import clock

    start = datetime(2030, 1, 1, tzinfo=UTC)
    with fake_clock(start) as fake:
        assert clock.now() == start
        assert fake.advance("1h30m") == start + timedelta(minutes=90)
        assert clock.now() == start + timedelta(minutes=90)
        fake.set(datetime(2031, 1, 1, tzinfo=UTC))
        assert clock.now() == datetime(2031, 1, 1, tzinfo=UTC)
    real = clock.now()
    assert abs(real - datetime.now(UTC)) < timedelta(seconds=5)


def test_settings_defaults_and_overrides_are_read_lazily(settings):
    settings.WAKES = {}
    assert wakes_settings.lease == timedelta(seconds=15)  # a killed runner's wakes are re-driven in seconds
    assert wakes_settings.max_attempts == 5
    assert wakes_settings.intent_max_bytes == 64 * 1024
    assert wakes_settings.spawn_turn is None
    assert wakes_settings.authorize is None
    settings.WAKES = {"LEASE": "30s", "MAX_ATTEMPTS": 2, "BACKOFF": {"BASE": "1s"}}
    assert wakes_settings.lease == timedelta(seconds=30)
    assert wakes_settings.max_attempts == 2
    # a partial BACKOFF dict keeps the other defaults
    assert wakes_settings.backoff_base == timedelta(seconds=1)
    assert wakes_settings.backoff_factor == 2.0
    assert wakes_settings.backoff_max == timedelta(hours=1)


def test_backoff_is_exponential_and_capped(settings):
    settings.WAKES = {"BACKOFF": {"BASE": "10s", "FACTOR": 3, "MAX": "5m"}}
    assert [wakes_settings.backoff(n) for n in range(1, 7)] == [
        timedelta(seconds=10),
        timedelta(seconds=30),
        timedelta(seconds=90),
        timedelta(seconds=270),
        timedelta(minutes=5),
        timedelta(minutes=5),
    ]
    # a huge attempt count does not overflow
    assert wakes_settings.backoff(10_000) == timedelta(minutes=5)
