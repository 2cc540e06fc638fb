"""Generated calls: every call valid under a tool's schema is done, or refused for a reason the schema cannot state.

Calls are drawn from the schemas themselves (each property's ``enum``, integer bounds, ``pattern``
as a regular expression, ``date-time`` as RFC 3339 text near and far from now), then kept only if
``jsonschema`` finds them valid, the conditional rules and lengths included, with a ``date-time``
format check written here from RFC 3339 (not the code under test). Each kept call goes through
``dispatch()`` in a fresh session; a refusal must be one docs/agents.md lists under "What the schema
cannot say", and this test recomputes the reason from the arguments before accepting it. The strict
OpenAI schemas are held to the same, plus what their strict subset drops (lengths, exactly-one-of).
"""

from __future__ import annotations

import itertools
import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import jsonschema
import pytest
from croniter import CroniterBadDateError, croniter
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from django_wakes.agents import tools
from django_wakes.agents.schemas import DATE_TIME_PATTERN, DURATION_PATTERN, POSITIVE_DURATION_PATTERN
from django_wakes.models import Wake
from django_wakes.text import control_character

pytestmark = [
    pytest.mark.django_db,
    # Arguments and schemas, not the database: once per suite run (CI's time), on SQLite.
    pytest.mark.skipif(os.environ.get("WAKES_TEST_DB", "sqlite") != "sqlite", reason="runs on the SQLite pass"),
]

NOW = datetime(2030, 1, 1, tzinfo=UTC)  # the clock fixture's time
MIN_DELAY, HORIZON = timedelta(seconds=10), timedelta(days=90)  # the default budgets
ZONES = available_timezones()
_sessions = itertools.count()


# --------------------------------------------------------------------------------------------------
# Reading the arguments independently of the code under test
# --------------------------------------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(text: str) -> float:
    return sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", text))


def rfc3339(text: str) -> datetime | None:
    """RFC 3339 section 5.6 read with the standard library: the instant, or None past the calendar's ends."""
    text = text[0:10] + "T" + text[11:].upper()
    leap = text[17:19] == "60"
    if leap:
        text = text[:17] + "59" + text[19:]
    fraction = re.search(r"\.(\d+)", text)
    if fraction:
        text = text.replace(fraction.group(0), "." + fraction.group(1)[:6].ljust(6, "0"))
    try:
        moment = datetime.fromisoformat(text).astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return moment.replace(microsecond=0) + timedelta(seconds=1) if leap else moment


def is_date_time(text: object) -> bool:
    """The ``date-time`` format: RFC 3339's grammar and a real day of a real month (year 0 is none)."""
    if not isinstance(text, str):
        return True  # a format says nothing about other types (a strict schema's null)
    if not re.fullmatch(DATE_TIME_PATTERN, text):
        return False
    try:
        datetime(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return True


FORMATS = jsonschema.FormatChecker()
FORMATS.checks("date-time")(is_date_time)


# --------------------------------------------------------------------------------------------------
# Calls from the schema
# --------------------------------------------------------------------------------------------------


def near_times() -> st.SearchStrategy[str]:
    """RFC 3339 text around now, in every spelling the grammar allows."""
    offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59)
    moments = st.datetimes(min_value=datetime(2029, 9, 1), max_value=datetime(2030, 6, 1))

    def spell(moment: datetime, offset: int, lower: bool, fraction: str) -> str:
        sign = "-" if offset < 0 else "+"
        zone = "Z" if offset == 0 else f"{sign}{abs(offset) // 60:02}:{abs(offset) % 60:02}"
        text = moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + zone
        return text.lower() if lower else text

    return st.builds(spell, moments, offsets, st.booleans(), st.sampled_from(["", ".5", ".123456789"]))


def near_durations() -> st.SearchStrategy[str]:
    return st.lists(st.tuples(st.integers(0, 200), st.sampled_from(list(_UNITS))), min_size=1, max_size=3).map(
        lambda parts: "".join(f"{n}{u}" for n, u in parts)
    )


def value_of(name: str, field: str, prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    if isinstance(prop["type"], list):  # strict: ["string", "null"]
        (kind,) = set(prop["type"]) - {"null"}
        return st.one_of(st.none(), value_of(name, field, {**prop, "type": kind}))
    if prop["type"] == "integer":
        return st.integers(prop.get("minimum", -(2**63)), prop.get("maximum", 2**63))
    pattern = prop.get("pattern")
    drawn: st.SearchStrategy[str] = st.from_regex(pattern, fullmatch=True) if pattern else st.text()
    if pattern == DATE_TIME_PATTERN:
        drawn = st.one_of(drawn, near_times())
    elif pattern in (DURATION_PATTERN, POSITIVE_DURATION_PATTERN):
        drawn = st.one_of(drawn, near_durations())
    elif field == "tz":
        drawn = st.one_of(drawn, st.sampled_from(sorted(ZONES)))
    elif field == "cron":
        drawn = st.one_of(drawn, st.sampled_from(["0 9 * * MON-FRI", "*/15 * * * *", "0 0 1 * *", "30 8 * * 1"]))
    return drawn


def calls(name: str, schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects of the schema's properties (each present or not), kept when the whole schema holds."""
    required = set(schema["required"])
    props = schema["properties"]
    drawn = st.fixed_dictionaries(
        {f: value_of(name, f, p) for f, p in props.items() if f in required},
        optional={f: value_of(name, f, p) for f, p in props.items() if f not in required},
    )
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
    return drawn.filter(validator.is_valid)


# --------------------------------------------------------------------------------------------------
# The reasons a valid call may still be refused
# --------------------------------------------------------------------------------------------------


def first_cron(expression: str, zone: str) -> datetime | None:
    if zone not in ZONES:
        return None
    local = NOW.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    try:
        return croniter(expression, local).get_next(datetime).replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
    except CroniterBadDateError:
        return None


def fire_time(args: dict[str, Any]) -> datetime | None:
    """When a follow-up would fire (None: past the calendar or never)."""
    if args.get("delay") is not None:
        try:
            return NOW + timedelta(seconds=seconds(args["delay"]))
        except OverflowError:
            return None
    if args.get("at") is not None:
        return rfc3339(args["at"])
    return first_cron(args["cron"], args.get("tz") or "UTC")


def explained(name: str, args: dict[str, Any], error: dict[str, Any], *, strict: bool) -> bool:
    """Whether the refusal is one docs/agents.md lists, and its reason holds for these arguments."""
    code, field = error["code"], error.get("field")
    given_ = {k: v for k, v in args.items() if v is not None}
    if strict:  # what the strict subset cannot say: lengths, exactly-one-of, tz or expires_in beside cron
        timing = [f for f in ("delay", "at", "cron") if f in given_]
        if name == "schedule_followup" and code == "invalid_arguments":
            if field is None and len(timing) != 1:
                return True
            if field == "tz" and "cron" not in given_:
                return True
            if field == "expires_in" and "cron" in given_:
                return True
        if code == "invalid_arguments" and "the limit is" in error["message"]:
            limit = tools.SCHEMAS[name]["properties"][field]["maxLength"]
            return len(given_[field]) > limit
    if name == "schedule_followup":
        if code == "invalid_arguments" and field == "tz":
            return given_["tz"] not in ZONES
        fires = fire_time(given_)
        if code == "too_soon":
            return fires is None or fires < NOW + MIN_DELAY
        if code == "too_far":
            return fires is None or fires > NOW + HORIZON - timedelta(days=1)
        if code == "invalid_arguments" and field == "expires_in":
            return fires is not None and NOW + timedelta(seconds=seconds(given_["expires_in"])) <= fires
        if code == "invalid_arguments" and field == "cron":
            return first_cron(given_["cron"], given_.get("tz") or "UTC") is None
    if code == "too_far" and field == "expires_in":  # an expiry past the year 9999
        return seconds(given_["expires_in"]) > (datetime(9999, 12, 31, tzinfo=UTC) - NOW).total_seconds()
    if name == "cancel_wake":
        return code == "not_found"  # a fresh session has no wakes
    if code == "invalid_request" and field == "event_key" and "control character" in error["message"]:
        return control_character(given_["event_key"]) is not None  # a key is printed in logs: docs/agents.md
    return False


def check(name: str, args: dict[str, Any], *, strict: bool) -> bool:
    """Run the call; fail unless it was done or refused for a documented reason; return whether it was done."""
    session = f"prop-{next(_sessions)}"
    result = tools.dispatch(name, args, workspace_id="ws-prop", session_id=session, on_approval=lambda w, t: None)
    if "error" in result:
        assert explained(name, args, result["error"], strict=strict), (args, result)
        assert not Wake.objects.filter(session_id=session).exists()
        return False
    if name in ("schedule_followup", "watch_event", "request_approval"):
        wake = Wake.objects.get(session_id=session)
        assert result["wake_id"] == wake.pk and result["state"] == "pending"
        given_ = {k: v for k, v in args.items() if v is not None}
        if name == "schedule_followup" and "cron" not in given_:
            assert wake.fire_at == fire_time(given_)
        if "note" in given_:
            assert result["note"] == given_["note"]
    return True


EXAMPLES = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same calls on every run: CI is not where a new one is found by chance
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a call runs dispatch() on the database, slowly
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


#: A call of each tool that must be done (run first, as an explicit example): the checks above see success too.
DONE = {
    "schedule_followup": {"delay": "1h", "note": "n"},
    "watch_event": {"event_key": "ci:pass:1"},
    "request_approval": {"prompt": "Deploy?", "expires_in": "1d"},
    "cancel_wake": {"wake_id": 1},  # not_found in a fresh session: the one refusal cancel_wake can have here
    "list_wakes": {},
}


@pytest.mark.parametrize("name", tools.TOOL_NAMES)
def test_every_call_valid_under_the_full_schema_is_done_or_refused_for_a_documented_reason(clock, spawned, name):
    done: list[bool] = []

    @EXAMPLES
    @given(calls(name, tools.SCHEMAS[name]))
    @example(DONE[name])
    def run(args: dict[str, Any]) -> None:
        done.append(check(name, args, strict=False))

    run()
    assert done[0] is (name != "cancel_wake") and len(done) > 20


@pytest.mark.parametrize("name", tools.TOOL_NAMES)
def test_every_call_valid_under_the_openai_strict_schema_is_done_or_refused_for_a_documented_reason(
    clock, spawned, name
):
    (definition,) = tools.tool_definitions("openai-responses", strict=True, names=[name])
    schema = definition["parameters"]

    done: list[bool] = []

    @EXAMPLES
    @given(calls(name, schema))
    @example({field: DONE[name].get(field) for field in schema["properties"]})
    def run(args: dict[str, Any]) -> None:
        assume(set(args) == set(schema["properties"]))  # strict: every property sent, null or not
        done.append(check(name, args, strict=True))

    run()
    assert done[0] is (name != "cancel_wake") and len(done) > 20
