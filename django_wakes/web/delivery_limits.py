"""How many deliveries a webhook source may have recorded: a rate, so the delivery table has a bound.

Every accepted delivery leaves a :class:`~django_wakes.models.WebhookDelivery` row for 30 days (gc), so
that a sender's late retry is still answered as a duplicate. Whoever holds a source's secret (or, before
GitHub duplicates were recognised by their body, whoever captured one GitHub request) could otherwise
grow the table without end. So each source may record at most ``MAX_DELIVERIES`` deliveries per
``PER`` (default 10,000 per hour); past it a signed request is answered 429 ``too_many_deliveries`` with
``Retry-After`` (the seconds until the oldest delivery of the window leaves it), and nothing is stored.
Every sender retries a 429 later (GitHub only when asked to: set the rate above what it sends).

The rows a source can hold are then at most ``MAX_DELIVERIES x 30 days / PER`` (7.2 million at the
default; 720 a day, 21,600 kept, at ``MAX_DELIVERIES: 30, PER: "1h"``). The count is read before the
delivery's transaction, not under a lock: processes racing at the limit may each record one more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .. import clock
from ..durations import parse_duration
from ..exceptions import WakeError
from ..models import WebhookDelivery
from .json_http import BadRequest

#: ``MAX_DELIVERIES`` of a source that sets none.
DEFAULT_MAX_DELIVERIES = 10_000
#: ``PER`` of a source that sets none.
DEFAULT_PER = timedelta(hours=1)
#: The shortest ``PER`` (a shorter window is a burst limit that retries cannot meet).
MIN_PER = timedelta(seconds=1)
#: The longest ``PER``: gc forgets deliveries after 30 days, so a longer window would count nothing more.
MAX_PER = timedelta(days=30)


def max_deliveries(value: Any) -> int:
    """``MAX_DELIVERIES`` as given; ``ValueError`` unless it is a positive int."""
    if value is None:
        return DEFAULT_MAX_DELIVERIES
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a positive integer, got {value!r:.60}")
    return value


def per(value: Any) -> timedelta:
    """``PER`` as a window; ``ValueError`` unless it is a duration from 1 second to 30 days."""
    if value is None:
        return DEFAULT_PER
    try:
        window = parse_duration(value, name="PER")
    except (WakeError, TypeError, ValueError) as exc:
        raise ValueError(f"must be a duration such as '1h' or a timedelta, got {value!r:.60}") from exc
    if not MIN_PER <= window <= MAX_PER:
        raise ValueError(f"must be from {MIN_PER} to {MAX_PER.days} days, got {window}")
    return window


def limits(config: Mapping[str, Any]) -> tuple[int, timedelta]:
    """A source's ``(MAX_DELIVERIES, PER)``; a bad value (reported by the system check E008) is the default."""
    try:
        count = max_deliveries(config.get("MAX_DELIVERIES"))
    except ValueError:
        count = DEFAULT_MAX_DELIVERIES
    try:
        window = per(config.get("PER"))
    except ValueError:
        window = DEFAULT_PER
    return count, window


def check_rate(source: str, using: str, allowed: int, window: timedelta) -> None:
    """Raise a 429 :class:`~.json_http.BadRequest` if ``source`` recorded ``allowed`` deliveries in ``window``."""
    now = clock.now()
    recent = WebhookDelivery.objects.using(using).filter(source=source, received_at__gt=now - window)
    count = recent[: allowed + 1].count()  # bounded: never counts past the limit
    if count < allowed:
        return
    # The window frees a place when its oldest delivery leaves it.
    oldest = recent.order_by("received_at").values_list("received_at", flat=True).first()
    wait = (oldest + window - now).total_seconds() if oldest is not None else window.total_seconds()
    retry_after = max(1, math.ceil(wait))
    raise BadRequest(
        429,
        "too_many_deliveries",
        f"Source {source!r} recorded {allowed} deliveries in the last {window}; retry in {retry_after} s.",
        headers={"Retry-After": str(retry_after)},
    )
