"""What an event watch waits for, decided without the database: match filters and retention periods.

A match filter is equality on paths of the delivered event: ``{"payload.branch": "main",
"payload.checks.0.state": "success"}``. A path starts at ``payload`` and walks dict keys (and list
indices, written as digits); every listed path must exist and equal its value for the watch to take
the delivery. The engine stores the filter with the watch and asks :func:`matches` at delivery.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .durations import Duration, parse_duration
from .exceptions import InvalidWake
from .timeutil import to_datetime
from .validation import json_value

#: A path starts here: the event's payload (the only part of an event a watcher does not already know).
ROOT = "payload"
MAX_PATHS = 20
MAX_PATH_LENGTH = 200

#: A signed webhook delivery's timestamp must be within this of the server's clock, and so must a replay:
#: a delivery id older than twice it can never be replayed, and gc may forget it.
WEBHOOK_TOLERANCE = timedelta(minutes=5)


def match_filter(value: Any, *, name: str = "match") -> dict[str, Any] | None:
    """Validate a match filter; return it as stored (``None`` when not given)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise InvalidWake(f'{name} must be a non-empty dict of "payload.<path>": value')
    if len(value) > MAX_PATHS:
        raise InvalidWake(f"{name} has {len(value)} paths; at most {MAX_PATHS}")
    for path in value:
        if not isinstance(path, str) or len(path) > MAX_PATH_LENGTH:
            raise InvalidWake(f"{name}: {path!r} is not a path string of at most {MAX_PATH_LENGTH} characters")
        parts = path.split(".")
        if parts[0] != ROOT or any(not part for part in parts):
            raise InvalidWake(f'{name}: {path!r} must look like "payload.field" or "payload.items.0.field"')
    checked: dict[str, Any] = json_value(value, name=name)
    return checked


def _walk(payload: Any, path: str) -> tuple[bool, Any]:
    here = payload
    for part in path.split(".")[1:]:
        if isinstance(here, dict) and part in here:
            here = here[part]
        elif isinstance(here, list) and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            return False, None
    return True, here


def matches(match: dict[str, Any] | None, payload: Any) -> bool:
    """Whether a delivered ``payload`` satisfies every path of ``match`` (no filter: always)."""
    if not match:
        return True
    for path, expected in match.items():
        found, value = _walk(payload, path)
        if not found or value != expected or type(value) is not type(expected):
            return False
    return True


def since_moment(value: datetime | Duration | int | float | None, now: datetime) -> datetime | None:
    """``since`` as an instant: a datetime (or epoch ms) as given, a duration as that long before now."""
    if value is None:
        return None
    if isinstance(value, str | timedelta):
        return now - parse_duration(value, name="since")
    return to_datetime(value, name="since")


def retention(value: Duration | None) -> timedelta | None:
    """How long a delivered event is kept for later watches (``None``: not kept)."""
    if value is None:
        return None
    return parse_duration(value, name="retain", allow_zero=False)
