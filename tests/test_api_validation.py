"""Create-call validation: bad input raises a named WakeError subclass and writes nothing.

Also the lazy public API: ``import django_wakes`` must not touch models.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import (
    InvalidDuration,
    InvalidIntent,
    InvalidTime,
    InvalidWake,
    UnknownKind,
    WakeError,
)
from django_wakes.models import Receipt, State, TriggerType, Wake, WakeAttempt

pytestmark = pytest.mark.django_db

KIND = "test.validation"
WS = "ws-validation"


@pytest.fixture
def kind(sinks):
    return sinks(KIND)


def _counts():
    return Wake.objects.count(), WakeAttempt.objects.count(), Receipt.objects.count()


def assert_refused(exc_type, call, match=None):
    """Run ``call``; it must raise ``exc_type`` (a WakeError) and leave every table untouched."""
    assert issubclass(exc_type, WakeError)
    before = _counts()
    with pytest.raises(exc_type, match=match) as info:
        call()
    assert isinstance(info.value, WakeError)
    assert str(info.value), "the error must name the problem"
    assert _counts() == before
    return info.value


# --------------------------------------------------------------------------------------------------
# schedule()
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("delay", ["soon", "", "10", "5 minutes", "-1s", "1h30", 90, 1.5, "1000000000d"])
def test_schedule_with_unparseable_delay(clock, kind, delay):
    assert_refused(InvalidDuration, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay=delay), "delay")


def test_schedule_with_a_delay_beyond_the_calendar_is_refused(clock, kind):
    # a parseable duration that would put fire_at past year 9999
    assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="999999999d"))


@pytest.mark.parametrize("at", [math.nan, math.inf, -math.inf, float("nan")])
def test_schedule_with_non_finite_epoch_ms(clock, kind, at):
    assert_refused(InvalidTime, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, at=at), "at")


def test_schedule_with_naive_datetime(clock, kind):
    naive = datetime(2030, 1, 2, 12, 0)
    assert_refused(InvalidTime, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, at=naive), "naive")


@pytest.mark.parametrize("at", ["2030-01-02T00:00:00Z", True, 10**30])
def test_schedule_with_unusable_at(clock, kind, at):
    assert_refused(InvalidTime, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, at=at))


def test_schedule_with_both_delay_and_at(clock, kind):
    err = assert_refused(
        InvalidWake,
        lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", at=clock.now() + timedelta(minutes=1)),
    )
    assert "delay" in str(err) and "at" in str(err)


def test_schedule_with_neither_delay_nor_at(clock, kind):
    err = assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND))
    assert "exactly one" in str(err)


@pytest.mark.parametrize(
    "intent",
    [
        {"when": datetime(2030, 1, 1, tzinfo=UTC)},
        {"set": {1, 2}},
        {"x": math.nan},
        {"x": math.inf},
        object(),
        {1: {2: b"bytes"}},
    ],
    ids=["datetime", "set", "nan", "inf", "object", "bytes"],
)
def test_schedule_with_non_json_intent(clock, kind, intent):
    assert_refused(InvalidIntent, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent=intent))


def test_oversized_intent_is_refused_and_limit_is_configurable(clock, kind, settings):
    settings.WAKES = {**settings.WAKES, "INTENT_MAX_BYTES": 100}
    big = {"blob": "x" * 200}
    err = assert_refused(
        InvalidIntent, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent=big), "intent"
    )
    assert "100" in str(err)
    # exactly at the limit is fine: '{"blob":"' + n*'x' + '"}' is n + 11 bytes
    fits = {"blob": "x" * 89}
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent=fits)
    assert Wake.objects.get(pk=wake.pk).intent == fits


def test_default_intent_limit_is_64_kib(clock, kind, settings):
    settings.WAKES = {k: v for k, v in settings.WAKES.items() if k != "INTENT_MAX_BYTES"}
    over = {"blob": "x" * (64 * 1024)}
    assert_refused(InvalidIntent, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent=over))
    under = {"blob": "x" * (64 * 1024 - 100)}
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent=under).pk


def test_multibyte_intent_is_measured_in_bytes(clock, kind, settings):
    settings.WAKES = {**settings.WAKES, "INTENT_MAX_BYTES": 50}
    # 30 characters but well over 50 bytes once encoded (json.dumps escapes to \\uXXXX: 6 bytes each)
    assert_refused(
        InvalidIntent, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent="é" * 30)
    )


@pytest.mark.parametrize("workspace", [None, "", "   ", 3.5, ["ws"], "w" * 201])
def test_schedule_with_bad_workspace(clock, kind, workspace):
    assert_refused(
        InvalidWake, lambda: django_wakes.schedule(workspace_id=workspace, kind=KIND, delay="1m"), "workspace"
    )


def test_schedule_with_unknown_kind(clock):
    err = assert_refused(UnknownKind, lambda: django_wakes.schedule(workspace_id=WS, kind="nobody.home", delay="1m"))
    assert "nobody.home" in str(err)


def test_kind_longer_than_the_column_is_refused_on_every_database(clock, sinks):
    long_kind = "k" * (Wake._meta.get_field("kind").max_length + 1)
    sinks(long_kind)
    assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, kind=long_kind, delay="1m"), "kind")
    assert_refused(InvalidWake, lambda: django_wakes.watch(workspace_id=WS, kind=long_kind, event_key="e"), "kind")


def test_session_turn_without_spawn_turn_is_unknown_kind(clock, settings):
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": None}
    err = assert_refused(UnknownKind, lambda: django_wakes.schedule(workspace_id=WS, session_id="s1", delay="1m"))
    assert "SPAWN_TURN" in str(err)


def test_session_turn_needs_a_session(clock, spawned):
    assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, delay="1m"), "session_id")


@pytest.mark.parametrize("bad_kind", ["", None, 5])
def test_schedule_with_bad_kind(clock, bad_kind):
    assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, kind=bad_kind, delay="1m"), "kind")


def test_expiry_in_the_past_or_now_is_refused(clock, kind):
    now = clock.now()
    assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_at=now))
    assert_refused(
        InvalidWake,
        lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_at=now - timedelta(seconds=1)),
    )
    assert_refused(
        InvalidDuration, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_in="0s")
    )
    assert_refused(
        InvalidDuration, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_in="tomorrow")
    )
    assert_refused(
        InvalidTime,
        lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", expires_at=datetime(2030, 2, 1)),
    )


def test_coalesce_without_serial_key_is_refused(clock, kind):
    assert_refused(InvalidWake, lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", coalesce=True))


@pytest.mark.parametrize("bad", [0, -1, True, "3", 2.0])
def test_max_attempts_must_be_a_positive_integer(clock, kind, bad):
    assert_refused(
        InvalidWake,
        lambda: django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", max_attempts=bad),
        "max_attempts",
    )


# --------------------------------------------------------------------------------------------------
# watch() and request_approval()
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("event_key", ["", "   ", None, "e" * 201])
def test_watch_with_empty_event_key(clock, kind, event_key):
    assert_refused(
        InvalidWake, lambda: django_wakes.watch(workspace_id=WS, kind=KIND, event_key=event_key), "event_key"
    )


def test_watch_with_bad_expiry_or_intent(clock, kind):
    assert_refused(
        InvalidDuration, lambda: django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", expires_in="x")
    )
    assert_refused(
        InvalidIntent, lambda: django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e", intent={"n": math.nan})
    )
    assert_refused(UnknownKind, lambda: django_wakes.watch(workspace_id=WS, kind="nobody.home", event_key="e"))


@pytest.mark.parametrize("prompt", ["", "   ", None, 42])
def test_request_approval_with_empty_prompt(clock, kind, prompt):
    assert_refused(
        InvalidWake,
        lambda: django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt=prompt, expires_in="1h"),
        "prompt",
    )


def test_request_approval_without_expiry(clock, kind):
    assert_refused(
        InvalidWake,
        lambda: django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="Deploy?"),
        "expires",
    )


def test_request_approval_with_bad_expiry(clock, kind):
    assert_refused(
        InvalidTime,
        lambda: django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="Deploy?", expires_at=math.nan),
    )
    assert_refused(
        InvalidWake,
        lambda: django_wakes.request_approval(
            workspace_id=WS, kind=KIND, prompt="Deploy?", expires_at=clock.now() - timedelta(minutes=1)
        ),
    )


def test_deliver_event_validates_before_touching_watchers(clock, kind):
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="e")
    assert_refused(InvalidWake, lambda: django_wakes.deliver_event(workspace_id=WS, event_key=""))
    assert_refused(InvalidIntent, lambda: django_wakes.deliver_event(workspace_id=WS, event_key="e", payload={1, 2}))
    row = Wake.objects.get(pk=wake.pk)
    assert row.fire_at is None and row.result is None and row.state == State.PENDING


# --------------------------------------------------------------------------------------------------
# What a valid create writes
# --------------------------------------------------------------------------------------------------


def test_valid_schedule_writes_one_pending_row(clock, kind):
    wake = django_wakes.schedule(
        workspace_id=WS, session_id="s-1", kind=KIND, delay="1h30m", serial_key="lane", intent={"say": "hi", "n": [1]}
    )
    row = Wake.objects.get(pk=wake.pk)
    assert Wake.objects.count() == 1
    assert row.state == State.PENDING
    assert row.trigger_type == TriggerType.AT
    assert row.fire_at == clock.now() + timedelta(minutes=90)
    assert row.due_at == row.fire_at
    assert row.expires_at is None
    assert row.intent == {"say": "hi", "n": [1]}
    assert row.result is None
    assert row.attempts == 0
    assert row.max_attempts == 5
    assert row.created_at == clock.now()
    assert row.session_id == "s-1" and row.workspace_id == WS and row.serial_key == "lane"


def test_intent_is_round_tripped_as_json(clock, kind):
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", intent={"t": (1, 2)})
    assert wake.intent == {"t": [1, 2]}
    assert Wake.objects.get(pk=wake.pk).intent == {"t": [1, 2]}


def test_at_accepts_epoch_milliseconds_and_other_zones(clock, kind):
    ms = int((clock.now() + timedelta(minutes=5)).timestamp() * 1000)
    by_ms = django_wakes.schedule(workspace_id=WS, kind=KIND, at=ms)
    assert Wake.objects.get(pk=by_ms.pk).fire_at == clock.now() + timedelta(minutes=5)
    from zoneinfo import ZoneInfo

    local = datetime(2030, 1, 1, 1, 0, tzinfo=ZoneInfo("Europe/Paris"))  # 00:00 UTC
    by_zone = django_wakes.schedule(workspace_id=WS, kind=KIND, at=local)
    assert Wake.objects.get(pk=by_zone.pk).fire_at == clock.now()


def test_expires_at_beats_expires_in(clock, kind):
    at = clock.now() + timedelta(hours=2)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="3h", expires_in="10m", expires_at=at)
    row = Wake.objects.get(pk=wake.pk)
    assert row.expires_at == at
    assert row.due_at == at  # the expiry comes first, so that is when a runner looks at it


def test_max_attempts_setting_is_the_default(clock, kind, settings):
    settings.WAKES = {**settings.WAKES, "MAX_ATTEMPTS": 2}
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m").max_attempts == 2
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", max_attempts=9).max_attempts == 9


def test_approval_stores_only_the_token_hash(clock, kind):
    from django.db import connection

    request = django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="Ship it?", expires_in="1h")
    token = request.token
    assert isinstance(token, str) and len(token) >= 32
    row = Wake.objects.filter(pk=request.wake.pk).values().get()
    assert row["token_hash"] == engine.hash_token(token)
    assert row["token_hash"] != token
    for column, value in row.items():
        assert token not in str(value), f"the raw token leaked into column {column}"
    # and not in the raw row either, whatever the ORM does
    table = connection.ops.quote_name(Wake._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [request.wake.pk])  # noqa: S608
        raw = cursor.fetchone()
    assert raw is not None
    assert all(token not in str(value) for value in raw)
    assert row["trigger_type"] == TriggerType.ON_APPROVAL
    assert row["prompt"] == "Ship it?"
    assert row["fire_at"] is None
    assert row["due_at"] == row["expires_at"] == clock.now() + timedelta(hours=1)


def test_tokens_are_unique_per_approval(clock, kind):
    tokens = {
        django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="?", expires_in="1h").token for _ in range(5)
    }
    assert len(tokens) == 5


# --------------------------------------------------------------------------------------------------
# The lazy public API
# --------------------------------------------------------------------------------------------------


def test_public_api_names_resolve():
    for name in django_wakes.__all__:
        assert getattr(django_wakes, name) is not None
    assert django_wakes.schedule is engine.schedule
    assert django_wakes.WakeError is WakeError
    with pytest.raises(AttributeError):
        django_wakes.no_such_thing  # noqa: B018
    assert "schedule" in dir(django_wakes)


def test_every_public_error_is_a_wake_error():
    for name in django_wakes.__all__:
        value = getattr(django_wakes, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, WakeError), name


def test_import_is_lazy_and_does_not_touch_models():
    code = (
        "import sys\n"
        "import django_wakes\n"
        "assert 'django_wakes.models' not in sys.modules, 'models imported'\n"
        "assert 'django_wakes.engine' not in sys.modules, 'engine imported'\n"
        "assert issubclass(django_wakes.UnknownKind, django_wakes.WakeError)\n"
        "assert 'django_wakes.models' not in sys.modules, 'models imported by an exception'\n"
        "import django.apps\n"
        "assert not django.apps.apps.ready\n"
        "print('lazy-ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "lazy-ok"
