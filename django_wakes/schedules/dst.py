"""Time zones and daylight saving: the chain's zone, where a zone's offset changes, and the DST policy.

A cron chain is evaluated in the local wall time of its ``tz``; :class:`DstPolicy` says what it does
when a wall time is repeated (fall-back) or skipped (spring-forward). ``every`` is elapsed time and
ignores the zone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings

from ..exceptions import InvalidSchedule
from ..models import Wake
from ..states import DstAmbiguous, DstMissing

TZ_MAX_LENGTH: int = Wake._meta.get_field("tz").max_length or 64
#: How far apart offset samples are when looking for DST transitions while counting missed slots.
#: Real zones never change offset twice within a day and back, so a daily probe finds every change.
_TRANSITION_PROBE = timedelta(days=1)


def _wall(moment: datetime, zone: tzinfo) -> datetime:
    """The naive local wall time of an aware instant."""
    return moment.astimezone(zone).replace(tzinfo=None)


def _offset(epoch_seconds: int, zone: tzinfo) -> timedelta | None:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).astimezone(zone).utcoffset()


def _first_with_offset(zone: tzinfo, before: datetime, after: datetime) -> datetime:
    """The transition instant between ``before`` (old offset) and ``after`` (new offset).

    Bisects on whole seconds (zone transitions happen on whole seconds): a bounded ~20 steps.
    """
    lo, hi = math.floor(before.timestamp()), math.ceil(after.timestamp())
    new = after.astimezone(zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(mid, zone) == new:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, tz=UTC)


def _transitions(zone: tzinfo, start: datetime, end: datetime) -> list[datetime]:
    """Every instant in ``(start, end]`` where the zone's UTC offset changes.

    Probes the offset once a day and bisects where it changed: the work is proportional to the
    number of days in the span, never to the number of slots.
    """
    found: list[datetime] = []
    here, offset = start, start.astimezone(zone).utcoffset()
    while here < end:
        there = min(here + _TRANSITION_PROBE, end)
        there_offset = there.astimezone(zone).utcoffset()
        if there_offset != offset:
            found.append(_first_with_offset(zone, here, there))
        here, offset = there, there_offset
    return found


@dataclass(frozen=True)
class DstPolicy:
    """What a cron chain does at the two daylight-saving edge cases; the default is the historical rule.

    ``ambiguous``: a wall time fall-back repeats (:class:`~django_wakes.states.DstAmbiguous`: ``auto``,
    ``first``, ``second``, ``both``). ``missing``: a wall time spring-forward skips
    (:class:`~django_wakes.states.DstMissing`: ``shift``, ``skip``). Stored on every occurrence of the
    chain (``Wake.dst_ambiguous`` / ``Wake.dst_missing``), so a chain keeps the rule it was created with.
    """

    ambiguous: str = DstAmbiguous.AUTO.value
    missing: str = DstMissing.SHIFT.value

    @property
    def is_default(self) -> bool:
        return self == DstPolicy()

    def describe(self) -> str:
        """One line for people: ``repeated hour: first instance only; skipped hour: skipped``."""
        return f"repeated hour: {DstAmbiguous(self.ambiguous).label}; skipped hour: {DstMissing(self.missing).label}"

    @classmethod
    def of(cls, wake: Wake) -> DstPolicy:
        """The policy stored on an occurrence (blank fields, as on rows older than the policy, are the default)."""
        return cls(wake.dst_ambiguous or DstAmbiguous.AUTO.value, wake.dst_missing or DstMissing.SHIFT.value)


def dst_policy(value: Any) -> DstPolicy:
    """Validate ``schedule(dst=...)``: ``None``, a :class:`DstPolicy`, a mapping or ``"ambiguous=both,missing=skip"``.

    Either key may be left out (it keeps the default). Anything else raises :class:`InvalidSchedule`.
    """
    if value is None:
        return DstPolicy()
    if isinstance(value, DstPolicy):
        given: dict[str, Any] = {"ambiguous": value.ambiguous, "missing": value.missing}
    elif isinstance(value, str):
        given = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, choice = part.partition("=")
            if not sep or name.strip() in given:
                raise InvalidSchedule(f"dst: expected 'ambiguous=...,missing=...', got {value!r}")
            given[name.strip()] = choice.strip()
    elif isinstance(value, dict):
        given = dict(value)
    else:
        raise InvalidSchedule(f"dst: expected a DstPolicy, a dict or a string, got {type(value).__name__}")
    unknown = sorted(str(k) for k in set(given) - {"ambiguous", "missing"})
    if unknown:
        raise InvalidSchedule(f"dst: unknown key(s) {', '.join(unknown)} (expected ambiguous, missing)")
    ambiguous = given.get("ambiguous", DstAmbiguous.AUTO.value)
    missing = given.get("missing", DstMissing.SHIFT.value)
    if not isinstance(ambiguous, str) or ambiguous not in DstAmbiguous.values:
        raise InvalidSchedule(f"dst: ambiguous must be one of {', '.join(DstAmbiguous.values)}, got {ambiguous!r}")
    if not isinstance(missing, str) or missing not in DstMissing.values:
        raise InvalidSchedule(f"dst: missing must be one of {', '.join(DstMissing.values)}, got {missing!r}")
    return DstPolicy(ambiguous, missing)


def _zone_name(tz: Any) -> str:
    name = settings.TIME_ZONE if tz is None else tz
    if not isinstance(name, str) or not name or len(name) > TZ_MAX_LENGTH:
        raise InvalidSchedule(f"tz: {name!r} is not an IANA time zone name")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(f"tz: unknown time zone {name!r}") from exc
    return name
