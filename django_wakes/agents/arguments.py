"""Check a tool call's arguments against its schema, keyword for keyword, and say what to fix.

``dispatch()`` runs these before anything is written: the arguments as a dict or as the JSON text a
model emits, ``null`` read as "absent" (strict modes make models send ``null`` for what they leave
out), then each value against exactly the keywords of :data:`~.schemas.SCHEMAS` (``type``,
``minLength``/``maxLength``, ``pattern``, ``enum``, ``format: date-time``, ``minimum``/``maximum``).
A refusal is a :class:`ToolError`, returned to the model as ``{"error": {"code", "message"[, "field"]}}``.

Imports nothing from Django.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from ..durations import parse_duration
from ..exceptions import InvalidDuration
from .schemas import (
    ARGUMENTS_MAX_CHARS,
    CRON_PATTERN,
    DATE_TIME_PATTERN,
    DURATION_PATTERN,
    POSITIVE_DURATION_PATTERN,
    TZ_PATTERN,
)

__all__ = ["ToolError", "bad_text", "check_arguments", "duration", "parse_arguments", "parse_rfc3339", "shown"]

_DURATION_HINT = (
    'a duration: a number (at most 3 decimals) and a unit (ms, s, m, h, d, w), parts run together, e.g. "90s", '
    '"15m", "1h30m", "3d"'
)
_DATE_TIME_EXAMPLE = '"2030-01-04T09:00:00+01:00" or "2030-01-04T08:00:00Z"'
#: What a value that does not match a pattern is told, by pattern.
_PATTERN_HINTS: dict[str, str] = {
    DURATION_PATTERN: f"must be {_DURATION_HINT}",
    POSITIVE_DURATION_PATTERN: f"must be {_DURATION_HINT}, longer than zero",
    CRON_PATTERN: (
        'must be a 5-field cron expression (minute hour day month weekday), e.g. "0 9 * * MON-FRI": *, numbers, '
        "ranges (1-5), lists (1,15), steps (*/15), month and day names in capitals"
    ),
    TZ_PATTERN: 'must be an IANA time zone name such as "Europe/Paris" or "UTC"',
    DATE_TIME_PATTERN: f"must be an RFC 3339 date-time with seconds and a UTC offset, e.g. {_DATE_TIME_EXAMPLE}",
}


class ToolError(Exception):
    """A refusal ``dispatch()`` returns to the model as ``{"error": {"code", "message"[, "field"]}}``."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field

    def as_result(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def shown(value: Any) -> str:
    """``value`` as short JSON for a message: ASCII, so a NUL or lone surrogate the model sent stays escaped."""
    text = json.dumps(value, default=str) if _json_type(value) != "object" else "{...}"
    return text if len(text) <= 60 else text[:57] + "..."


def bad_text(text: str) -> str | None:
    """Why a string can be stored the same way on no database (a NUL or a lone surrogate), or ``None``."""
    for char in text:
        if char == "\x00":
            return "must not contain a NUL character (U+0000)"
        if "\ud800" <= char <= "\udfff":
            return "must not contain a lone surrogate (invalid Unicode)"
    return None


# --------------------------------------------------------------------------------------------------
# RFC 3339
# --------------------------------------------------------------------------------------------------

_RFC3339 = re.compile(DATE_TIME_PATTERN)


class _OutOfRange(ValueError):
    """An RFC 3339 time this calendar cannot hold: before the year 1 or after 9999 (in UTC)."""

    def __init__(self, early: bool) -> None:
        super().__init__("before the year 1" if early else "after the year 9999")
        self.early = early


def parse_rfc3339(text: str) -> datetime:
    """Return the RFC 3339 ``date-time`` ``text`` (section 5.6) as an aware UTC datetime.

    Only that grammar: a full date, ``T`` (or ``t``), a time with seconds, optional fractions
    (rounded down to microseconds), and ``Z`` (or ``z``) or a ``+hh:mm``/``-hh:mm`` offset. A leap
    second (``:60``) is read as the next second, as POSIX time counts it. No space for ``T``, no
    basic (``20261211T090000Z``) or week-date form, no time without seconds or offset: what
    ``datetime.fromisoformat`` accepts beyond that is refused. Raise ``ValueError`` (saying why) if
    ``text`` is not such a date-time, :class:`_OutOfRange` if the instant is outside years 1-9999.
    """
    match = _RFC3339.search(text)
    if match is None:
        raise ValueError("not an RFC 3339 date-time")
    body = match.group(0)
    year, month, day = int(body[0:4]), int(body[5:7]), int(body[8:10])
    hour, minute, second = int(body[11:13]), int(body[14:16]), int(body[17:19])
    rest = body[19:]
    micro = 0
    if rest.startswith("."):
        digits = re.match(r"\.([0-9]+)", rest)
        assert digits is not None  # the pattern put them there
        micro = int(digits.group(1)[:6].ljust(6, "0"))
        rest = rest[digits.end() :]
    if rest in ("Z", "z"):
        offset = timedelta(0)
    else:
        sign = -1 if rest[0] == "-" else 1
        offset = sign * timedelta(hours=int(rest[1:3]), minutes=int(rest[4:6]))
    if year == 0:
        raise _OutOfRange(early=True)
    if day > calendar.monthrange(year, month)[1]:
        raise ValueError(f"{calendar.month_name[month]} {year} has no day {day}")
    leap = second == 60
    try:
        local = datetime(year, month, day, hour, minute, 59 if leap else second, micro, tzinfo=timezone(offset))
        moment = local.astimezone(UTC)
        if leap:
            moment = moment.replace(microsecond=0) + timedelta(seconds=1)
    except OverflowError:
        raise _OutOfRange(early=year < 5000) from None
    return moment


def _date_time(field: str, value: str) -> datetime:
    try:
        return parse_rfc3339(value)
    except _OutOfRange as exc:
        if exc.early:
            raise ToolError("too_soon", f"{field} {shown(value)} is in the past", field=field) from None
        raise ToolError("too_far", f"{field} {shown(value)} is after the year 9999", field=field) from None
    except ValueError as exc:
        hint = _PATTERN_HINTS[DATE_TIME_PATTERN]
        try:
            lenient = datetime.fromisoformat(value)
        except ValueError:
            lenient = None
        if lenient is not None and lenient.tzinfo is None:
            hint = f"has no UTC offset: add one, e.g. {_DATE_TIME_EXAMPLE} (or use delay for a relative time)"
        elif str(exc) != "not an RFC 3339 date-time":
            hint = f"is not a real date ({exc})"
        raise ToolError("invalid_arguments", f"{field} {shown(value)} {hint}", field=field) from None


# --------------------------------------------------------------------------------------------------
# Values against their schema
# --------------------------------------------------------------------------------------------------


def _check(field: str, prop: Mapping[str, Any], value: Any) -> Any:
    """Return ``value`` (a ``date-time`` parsed to an aware datetime) if it meets ``prop``; raise otherwise."""
    kind = prop["type"]
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON Schema: 3.0 is an integer
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolError(
                "invalid_arguments", f"{field} must be an integer, got {_json_type(value)} {shown(value)}", field=field
            )
        if "minimum" in prop and value < prop["minimum"]:
            raise ToolError(
                "invalid_arguments", f"{field} must be at least {prop['minimum']}, got {value}", field=field
            )
        if "maximum" in prop and value > prop["maximum"]:
            raise ToolError("invalid_arguments", f"{field} must be at most {prop['maximum']}, got {value}", field=field)
        return value
    if kind != "string":  # pragma: no cover - the schemas use strings and integers only
        raise AssertionError(f"unsupported schema type {kind!r}")
    if not isinstance(value, str):
        raise ToolError(
            "invalid_arguments", f"{field} must be a string, got {_json_type(value)} {shown(value)}", field=field
        )
    problem = bad_text(value)
    if problem:
        raise ToolError("invalid_arguments", f"{field} {problem}", field=field)
    if not value.strip() or ("minLength" in prop and len(value) < prop["minLength"]):
        raise ToolError("invalid_arguments", f"{field} must not be empty or blank", field=field)
    if "maxLength" in prop and len(value) > prop["maxLength"]:
        raise ToolError(
            "invalid_arguments",
            f"{field} is {len(value)} characters long; the limit is {prop['maxLength']}: shorten it",
            field=field,
        )
    if "enum" in prop and value not in prop["enum"]:
        allowed = ", ".join(json.dumps(v) for v in prop["enum"])
        raise ToolError("invalid_arguments", f"{field} must be one of {allowed}, got {shown(value)}", field=field)
    if prop.get("format") == "date-time":
        return _date_time(field, value)
    pattern = prop.get("pattern")
    if pattern is not None and re.search(pattern, value) is None:
        hint = _PATTERN_HINTS.get(pattern, "must not be blank")
        raise ToolError("invalid_arguments", f"{field} {hint}, got {shown(value)}", field=field)
    return value


def check_arguments(name: str, schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema; return them cleaned (``null`` ones dropped).

    The conditional rules of a schema (``schedule_followup``'s exactly-one-of) are its handler's to
    check, with messages that name the arguments.
    """
    if not isinstance(arguments, dict):
        raise ToolError("invalid_arguments", f"{name} takes a JSON object of arguments, got {_json_type(arguments)}")
    properties: Mapping[str, Mapping[str, Any]] = schema["properties"]
    accepted = ", ".join(properties) or "no arguments"
    unknown = [f for f in arguments if f not in properties]
    if unknown:
        listed = ", ".join(shown(f) for f in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        first = unknown[0]
        plain = isinstance(first, str) and len(first) <= 100 and bad_text(first) is None
        raise ToolError(
            "invalid_arguments",
            f"unknown argument{'s' if len(unknown) > 1 else ''} {listed}; {name} accepts: {accepted}",
            field=first if plain else None,
        )
    given = {field: value for field, value in arguments.items() if value is not None}  # null: left out
    for field in schema["required"]:
        if field not in given:
            raise ToolError(
                "invalid_arguments", f"missing required argument {field!r} ({properties[field]['type']})", field=field
            )
    return {field: _check(field, properties[field], value) for field, value in given.items()}


def parse_arguments(arguments: Any) -> Any:
    """Return the arguments as Python values: a mapping as a dict, JSON text parsed, ``None`` or ``""`` as ``{}``."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, bytes | bytearray):
        try:
            arguments = bytes(arguments).decode()
        except UnicodeDecodeError:
            raise ToolError("invalid_json", "the arguments are not UTF-8 text: send a JSON object") from None
    if not isinstance(arguments, str):
        return arguments  # refused by check_arguments as "not a JSON object"
    if not arguments.strip():
        return {}
    if len(arguments) > ARGUMENTS_MAX_CHARS:
        raise ToolError(
            "invalid_arguments",
            f"the arguments are {len(arguments)} characters long; the limit is {ARGUMENTS_MAX_CHARS}",
        )

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(arguments, parse_constant=no_constant)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or "nested too deeply"
        raise ToolError(
            "invalid_json", f'the arguments are not valid JSON ({detail}): send one JSON object, e.g. {{"wake_id": 12}}'
        ) from None


def duration(field: str, value: str) -> timedelta:
    """The duration a pattern-checked argument names; one too large for the calendar is ``too_far``."""
    try:
        return parse_duration(value, name=field)
    except InvalidDuration as exc:
        raise ToolError("too_far", f"{field} {shown(value)} reaches past the year 9999", field=field) from exc
