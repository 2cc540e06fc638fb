"""Parse the duration strings the public API accepts ("90s", "15m", "1h30m", "3d")."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .exceptions import InvalidDuration

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")

Duration = str | timedelta


def parse_duration(value: Duration, *, name: str = "duration", allow_zero: bool = True) -> timedelta:
    """Return ``value`` as a :class:`timedelta`.

    Accept a ``timedelta`` or a compact string of number+unit parts (``ms s m h d w``), such as
    ``"90s"``, ``"1h30m"`` or ``"1.5h"``. Reject negatives, empty strings and anything else with
    :class:`InvalidDuration`, naming the argument, because a silently misread delay is a wake that
    fires at the wrong time.
    """
    if isinstance(value, bool):  # type: ignore[unreachable]  # a bool is an int: refuse True/False
        raise InvalidDuration(f"{name}: expected a duration string or timedelta, got {value!r}")
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if not text or not _WHOLE.fullmatch(text):
            raise InvalidDuration(f"{name}: cannot parse {value!r}; use forms like '90s', '15m', '1h30m', '3d'")
        seconds = sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _PART.findall(text))
        if not math.isfinite(seconds):
            raise InvalidDuration(f"{name}: {value!r} is not finite")
        try:
            delta = timedelta(seconds=seconds)
        except OverflowError as exc:
            raise InvalidDuration(f"{name}: {value!r} is too large") from exc
    else:
        raise InvalidDuration(f"{name}: expected a duration string or timedelta, got {type(value).__name__}")
    if delta < timedelta(0) or (not allow_zero and delta == timedelta(0)):
        raise InvalidDuration(f"{name}: must be {'positive' if not allow_zero else 'non-negative'}, got {value!r}")
    return delta


_PLAIN_UNITS = (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000), ("millisecond", 1))


def plain_duration(delta: timedelta) -> str:
    """Return ``delta`` in words for people and models: "90 days", "10 seconds", "1 hour 30 minutes".

    Days are the largest unit (a week is "7 days"); below a millisecond is rounded away; zero is
    "0 seconds". ``str(timedelta)`` ("90 days, 0:00:00") is what a model must not be asked to read.
    """
    sign = "-" if delta < timedelta(0) else ""
    left = round(abs(delta) / timedelta(milliseconds=1))
    parts = []
    for name, size in _PLAIN_UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count:,} {name}{'' if count == 1 else 's'}")
    return sign + (" ".join(parts) if parts else "0 seconds")
