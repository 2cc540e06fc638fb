"""Create-call validation: bad input raises a named WakeError subclass and writes nothing.

Also the lazy public API: ``import django_wakes`` must not touch models.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import (
    ApprovalNotFound,
    InvalidDuration,
    InvalidIntent,
    InvalidTime,
    InvalidWake,
    UnknownKind,
    WakeError,
)
from django_wakes.models import KEY_LENGTH, Receipt, State, TriggerType, Wake, WakeAttempt
from django_wakes.validation import JSON_MAX_DEPTH, POSITIVE_INT_MAX, PROMPT_MAX_LENGTH

pytestmark = pytest.mark.django_db

KIND = "test.validation"
WS = "ws-validation"


@pytest.fixture
def kind(sinks):
    return sinks(KIND)


def _rows():
    """Every row of every table the API writes, so "nothing was written" covers updates too."""
    return [list(model.objects.order_by("pk").values()) for model in (Wake, WakeAttempt, Receipt)]


def assert_refused(exc_type, call, match=None):
    """Run ``call``; it must raise ``exc_type`` (a WakeError) and leave every table untouched."""
    assert issubclass(exc_type, WakeError)
    before = _rows()
    with pytest.raises(exc_type, match=match) as info:
        call()
    assert isinstance(info.value, WakeError)
    assert str(info.value), "the error must name the problem"
    assert _rows() == before
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
# Values a database would refuse: refused first, by every entry point, the same on every database
# (PostgreSQL: no NUL in text or jsonb, varchar and integer bounds; MariaDB: varchar bounds, JSON
# nesting; every driver: no surrogates). Run this module on all three: that is its point.
# --------------------------------------------------------------------------------------------------

KIND_LENGTH = Wake._meta.get_field("kind").max_length
APPROVER = "alice"  # testproject's AUTHORIZE lets an actor answer in a workspace whose id names it
APPROVAL_WS = f"ws-{APPROVER}"


def nested(depth, leaf="🦉"):
    """``depth`` lists inside each other around ``leaf``, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _cycle():
    loop = []
    loop.append(loop)
    return loop


class Effect:
    """A ``once()`` callable that counts its calls."""

    def __init__(self, value="done"):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


def _create(entry, **overrides):
    """Call a create entry point with valid arguments, but ``overrides``."""
    args = {"workspace_id": WS, "kind": KIND}
    args.update(
        {
            "schedule": {"delay": "1m"},
            "watch": {"event_key": "ev"},
            "request_approval": {"prompt": "Ship it?", "expires_in": "1h"},
        }[entry]
    )
    args.update(overrides)
    return getattr(django_wakes, entry)(**args)


@pytest.fixture
def targets(clock, kind):
    """Rows a refused trigger must leave alone: a watcher of "ev" and an open approval."""
    watcher = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="ev")
    approval = django_wakes.request_approval(workspace_id=APPROVAL_WS, kind=KIND, prompt="Ship?", expires_in="1h")
    return watcher, approval


CREATES = ("schedule", "watch", "request_approval")
KEY_FIELDS = [
    *[(entry, field) for entry in CREATES for field in ("workspace_id", "session_id", "serial_key", "idempotency_key")],
    *[(entry, "kind") for entry in CREATES],
    ("watch", "event_key"),
    ("deliver_event", "workspace_id"),
    ("deliver_event", "event_key"),
    ("once", "session_id"),
    ("once", "key"),
]
TOO_LONG = object()  # the column's length + 1, per field
BAD_KEYS = [
    pytest.param("a\x00b", "NUL", id="nul"),
    pytest.param("\x00", "NUL", id="only-nul"),
    pytest.param("lane\ud800", "surrogate", id="lone-high-surrogate"),
    pytest.param("\udfff", "surrogate", id="lone-low-surrogate"),
    pytest.param("\ud83d\ude00", "surrogate", id="surrogate-pair-as-two-code-points"),
    pytest.param(TOO_LONG, "limit", id="one-past-the-column"),
    pytest.param("", "empty", id="empty"),
    pytest.param(" \t ", "blank", id="blank"),
    pytest.param(7, "string", id="int"),
    pytest.param(b"ws", "string", id="bytes"),
    pytest.param(True, "string", id="bool"),
]


def _key_call(entry, field, value):
    if entry == "deliver_event":
        args = {"workspace_id": WS, "event_key": "ev", field: value}
        return lambda: django_wakes.deliver_event(**args)
    if entry == "once":
        args = {"session_id": "s", "key": "k", field: value}
        return lambda: django_wakes.once(fn=Effect(), **args)
    return lambda: _create(entry, **{field: value})


@pytest.mark.parametrize(("value", "problem"), BAD_KEYS)
@pytest.mark.parametrize(("entry", "field"), KEY_FIELDS, ids=[f"{e}.{f}" for e, f in KEY_FIELDS])
def test_a_key_a_database_would_refuse_is_refused_first(targets, sinks, entry, field, value, problem):
    if value is TOO_LONG:
        value = "k" * ((KIND_LENGTH if field == "kind" else KEY_LENGTH) + 1)
    if field == "kind" and isinstance(value, str) and value:
        sinks(value)  # a sink exists: only validation stands between the value and the database
    err = assert_refused(InvalidWake, _key_call(entry, field, value), problem)
    assert type(err) is InvalidWake
    assert field in str(err)


JSON_FIELDS = [(entry, "intent") for entry in CREATES] + [("deliver_event", "payload"), ("resolve", "answer")]
BAD_JSON = [
    pytest.param(lambda: {"note": "a\x00b"}, "['note'] contains a NUL", id="nul-in-a-string"),
    pytest.param(lambda: ["ok", {"a\x00": 1}], "[1] has a key that contains a NUL", id="nul-in-a-key"),
    pytest.param(
        lambda: {"items": [1, {"deep": ["ok", "\ud800"]}]},
        "['items'][1]['deep'][1] contains a surrogate",
        id="lone-surrogate-deep-inside",
    ),
    pytest.param(lambda: {"\udc00": 1}, "has a key that contains a surrogate", id="surrogate-in-a-key"),
    pytest.param(lambda: "\ud83d\ude00", "contains a surrogate", id="surrogate-pair-as-two-code-points"),
    pytest.param(lambda: {"x": math.nan}, "['x'] is nan", id="nan"),
    pytest.param(lambda: [-math.inf], "[0] is -inf", id="infinity"),
    pytest.param(lambda: {1: "one"}, "has a key of type int", id="int-key"),
    pytest.param(lambda: {"b": b"bytes"}, "['b'] is a bytes", id="bytes"),
    pytest.param(lambda: {"d": [Decimal("1.5")]}, "['d'][0] is a Decimal", id="decimal"),
    pytest.param(lambda: {"s": {1, 2}}, "['s'] is a set", id="set"),
    pytest.param(lambda: nested(JSON_MAX_DEPTH + 1), f"nested deeper than {JSON_MAX_DEPTH}", id="one-level-too-deep"),
    pytest.param(lambda: {"a": nested(JSON_MAX_DEPTH)}, "['a']" + "[0]" * (JSON_MAX_DEPTH - 1), id="too-deep-path"),
    pytest.param(lambda: nested(100_000), "nested deeper", id="100000-levels-deep"),
    pytest.param(_cycle, "nested deeper", id="a-list-inside-itself"),
    pytest.param(lambda: {"blob": "x" * 70_000}, "INTENT_MAX_BYTES", id="over-64-KiB"),
    pytest.param(lambda: ["x"] * 1_000_000, "INTENT_MAX_BYTES", id="a-million-items"),
]


def _json_call(entry, field, value, approval_token):
    if entry == "deliver_event":
        return lambda: django_wakes.deliver_event(workspace_id=WS, event_key="ev", payload=value)
    if entry == "resolve":
        return lambda: django_wakes.resolve(approval_token, value, APPROVER)
    return lambda: _create(entry, **{field: value})


@pytest.mark.parametrize(("make", "problem"), BAD_JSON)
@pytest.mark.parametrize(("entry", "field"), JSON_FIELDS, ids=[f"{e}.{f}" for e, f in JSON_FIELDS])
def test_json_a_database_would_refuse_is_refused_first(targets, entry, field, make, problem):
    _, approval = targets
    err = assert_refused(InvalidIntent, _json_call(entry, field, make(), approval.token))
    assert str(err).startswith(field), "the message starts with the field"
    assert problem in str(err)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("make", "problem"), BAD_JSON)
def test_a_once_result_a_database_would_refuse_is_not_stored(make, problem):
    effect = Effect(make())
    with pytest.raises(InvalidIntent) as info:
        django_wakes.once("s", "k", effect)
    assert str(info.value).startswith("once() result") and problem in str(info.value)
    # The effect happened: the receipt says so (without a result), so it never runs again.
    receipt = Receipt.objects.get(session_id="s", key="k")
    assert receipt.state == "done" and receipt.result is None
    assert django_wakes.once("s", "k", effect) is None and effect.calls == 1


@pytest.mark.parametrize("entry", CREATES)
@pytest.mark.parametrize("bad", [2**31, 2**32, 2**63, 10**30, 0, -1, True, "3", 2.0, Decimal(3)])
def test_max_attempts_beyond_the_column_is_refused_first(targets, entry, bad):
    err = assert_refused(InvalidWake, lambda: _create(entry, max_attempts=bad), "max_attempts")
    assert str(POSITIVE_INT_MAX) in str(err)


@pytest.mark.parametrize(
    "prompt",
    [
        pytest.param("Ship\x00it?", id="nul"),
        pytest.param("Ship it?\ud800", id="lone-surrogate"),
        pytest.param("x" * (PROMPT_MAX_LENGTH + 1), id="one-past-the-limit"),
        pytest.param("x" * 10_000_000, id="10-MB"),
        pytest.param("", id="empty"),
        pytest.param(" \n ", id="blank"),
        pytest.param(None, id="none"),
        pytest.param(b"Ship it?", id="bytes"),
    ],
)
def test_a_prompt_a_database_would_refuse_or_too_long_is_refused_first(targets, prompt):
    err = assert_refused(InvalidWake, lambda: _create("request_approval", prompt=prompt), "prompt")
    assert type(err) is InvalidWake


@pytest.mark.parametrize("entry", ["cancel", "requeue"])
@pytest.mark.parametrize("bad", ["abc", "REAL-ID", 1.0, True, False, None, [1], Decimal(1)])
def test_cancel_and_requeue_take_only_an_int_id(targets, entry, bad):
    watcher, _ = targets
    if bad == "REAL-ID":
        bad = str(watcher.pk)  # a numeric string is not an id either, even one that exists
    err = assert_refused(InvalidWake, lambda: getattr(django_wakes, entry)(bad), "wake id")
    assert str(err).startswith(f"{entry}()")


@pytest.mark.parametrize("entry", ["cancel", "requeue"])
@pytest.mark.parametrize("missing", [0, -1, 2**63 - 1, 2**63, 2**64, 10**30])
def test_an_int_id_no_wake_has_is_not_found_on_every_database(targets, entry, missing):
    before = _rows()
    assert getattr(django_wakes, entry)(missing) is False
    assert _rows() == before


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("tok\x00en", id="nul"),
        pytest.param("\x00", id="only-nul"),
        pytest.param("tok\ud800en", id="lone-surrogate"),
        pytest.param("", id="empty"),
        pytest.param(None, id="none"),
        pytest.param(5, id="int"),
        pytest.param(b"token", id="bytes"),
    ],
)
def test_a_malformed_token_is_not_found(targets, token):
    assert_refused(ApprovalNotFound, lambda: django_wakes.resolve(token, True, APPROVER))


def test_the_real_token_with_a_nul_appended_is_not_found(targets):
    _, approval = targets
    assert_refused(ApprovalNotFound, lambda: django_wakes.resolve(approval.token + "\x00", True, APPROVER))


@pytest.mark.parametrize("token_hash", ["a\x00b", "\ud800", "0" * 63 + "\x00", "A" * 64, "g" * 64, "", None])
def test_a_malformed_token_hash_is_not_found(targets, token_hash):
    # What the approval page hands the engine from its session.
    assert_refused(ApprovalNotFound, lambda: engine.resolve_hashed(token_hash, True, APPROVER))
    assert_refused(ApprovalNotFound, lambda: engine.open_approval(token_hash, APPROVER))


@pytest.mark.parametrize("actor", ["ali\x00ce", "alice\ud800"])
def test_an_actor_name_a_database_would_refuse_is_refused_first(targets, actor):
    _, approval = targets
    err = assert_refused(InvalidIntent, lambda: django_wakes.resolve(approval.token, True, actor))
    assert str(err).startswith("actor")


def test_edge_values_every_database_stores_pass_and_come_back_unchanged(clock, sinks):
    """4-byte characters, keys of exactly the column's length, JSON exactly at the depth limit."""
    emoji_kind = "🦉" * KIND_LENGTH
    calls = sinks(emoji_kind)
    workspace = "😀" * KEY_LENGTH  # names the approver below, for testproject's AUTHORIZE
    lane = "🦉" * KEY_LENGTH
    intent = {
        "deep": nested(JSON_MAX_DEPTH - 1),  # the dict is the first level
        "big": 2**70,
        "negative": -(2**70),
        "half": 0.5,
        "none": None,
        "yes": True,
        "🔑": "𝄞 \u0001 \t",
    }
    deep = nested(JSON_MAX_DEPTH)  # a payload and an answer are stored one level down, inside result

    scheduled = django_wakes.schedule(
        workspace_id=workspace,
        session_id="  padded, not stripped  ",
        serial_key=lane,
        idempotency_key="🦉" * KEY_LENGTH,
        kind=emoji_kind,
        intent=intent,
        max_attempts=POSITIVE_INT_MAX,
        delay="1m",
    )
    watcher = django_wakes.watch(workspace_id=workspace, event_key="😀" * KEY_LENGTH, kind=emoji_kind, intent=deep)
    assert django_wakes.deliver_event(workspace_id=workspace, event_key="😀" * KEY_LENGTH, payload=deep) == 1
    approval = django_wakes.request_approval(
        workspace_id=workspace, prompt="🦉" * PROMPT_MAX_LENGTH, kind=emoji_kind, expires_in="1h"
    )
    django_wakes.resolve(approval.token, deep, "😀")

    row = Wake.objects.get(pk=scheduled.pk)
    assert (row.workspace_id, row.session_id, row.serial_key) == (workspace, "  padded, not stripped  ", lane)
    assert (row.kind, row.idempotency_key, row.max_attempts) == (emoji_kind, "🦉" * KEY_LENGTH, POSITIVE_INT_MAX)
    assert row.intent == intent
    assert Wake.objects.get(pk=watcher.pk).result["payload"] == deep
    answered = Wake.objects.get(pk=approval.wake.pk)
    assert answered.prompt == "🦉" * PROMPT_MAX_LENGTH
    assert answered.result["answer"] == deep and answered.result["resolved_by"] == "😀"

    clock.advance("1m")
    assert django_wakes.run_due().fired == 3
    by_id = dict(calls)
    assert by_id[watcher.pk]["payload"] == deep and by_id[approval.wake.pk]["answer"] == deep
    assert calls.wakes[[w.pk for w in calls.wakes].index(scheduled.pk)].intent == intent


@pytest.mark.django_db(transaction=True)
def test_once_edge_values_pass_and_replay_unchanged():
    session, effect_key = "😀" * KEY_LENGTH, "🦉" * KEY_LENGTH
    value = {"deep": nested(JSON_MAX_DEPTH - 1), "big": 2**70}
    effect = Effect(value)
    assert django_wakes.once(session, effect_key, effect) == value
    assert django_wakes.once(session, effect_key, effect) == value and effect.calls == 1
    assert Receipt.objects.get(session_id=session, key=effect_key).result == value


def test_the_limits_are_the_documented_ones():
    assert (JSON_MAX_DEPTH, PROMPT_MAX_LENGTH, POSITIVE_INT_MAX, KEY_LENGTH, KIND_LENGTH) == (
        30,
        10_000,
        2_147_483_647,
        200,
        100,
    )
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for shown in ("30 levels", "10,000 characters", "2,147,483,647", "200 characters", "100 characters"):
        assert shown in readme, f"README's table of limits should say {shown!r}"


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
