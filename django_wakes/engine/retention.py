"""Retained events and the key locks that make a delivery and a ``since`` watch see each other.

A delivery with ``retain`` and a watch with ``since`` of the same key both lock that key's
:class:`~django_wakes.models.EventKeyLock` row first (inserted if missing), inside their own
transaction. Whichever commits first, the other — reading after the lock, under READ COMMITTED —
sees it: the watch finds the retained event, or the delivery finds the watch. Never neither; and
never both, since a watch created already triggered has ``fire_at`` set, which a delivery skips.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ..conf import wakes_settings
from ..events import matches
from ..models import EventKeyLock, RetainedEvent
from .shared import lock_or_create, logger

#: How long a key lock row outlives its last use before gc deletes it.
LOCK_IDLE = timedelta(days=1)


def lock_event_keys(using: str, workspace_id: str, keys: Iterable[str], now: datetime) -> None:
    """Lock the (workspace, key) rows of ``keys`` in key order until the caller's transaction ends."""
    rows = EventKeyLock.objects.using(using).all()
    for event_key in sorted(set(keys)):
        lock = lock_or_create(rows, {"workspace_id": workspace_id, "event_key": event_key}, {"used_at": now})
        if lock.used_at < now:
            rows.filter(pk=lock.pk).update(used_at=now)


def retained_hit(
    using: str, workspace_id: str, keys: list[str], since: datetime, now: datetime, match: dict[str, Any] | None
) -> RetainedEvent | None:
    """The earliest retained event of ``keys`` delivered at or after ``since`` that ``match`` accepts."""
    candidates = (
        RetainedEvent.objects.using(using)
        .filter(workspace_id=workspace_id, event_key__in=keys, delivered_at__gte=since, expires_at__gt=now)
        .order_by("delivered_at", "id")
    )
    for event in candidates.iterator(chunk_size=100):
        if matches(match, event.payload):
            return event
    return None


def retain(using: str, workspace_id: str, event_key: str, payload: Any, now: datetime, keep: timedelta) -> None:
    """Keep a delivered event until ``now + keep``; trim the workspace to ``WAKES['RETAIN_MAX']`` events."""
    events = RetainedEvent.objects.using(using)
    events.create(
        workspace_id=workspace_id, event_key=event_key, payload=payload, delivered_at=now, expires_at=now + keep
    )
    cap = wakes_settings.retain_max
    surplus = list(
        events.filter(workspace_id=workspace_id)
        .order_by("-delivered_at", "-id")
        .values_list("pk", flat=True)[cap : cap + 100]
    )
    if surplus:
        events.filter(pk__in=surplus).delete()
        logger.debug("workspace %s: over %d retained events; dropped the %d oldest", workspace_id, cap, len(surplus))


def forget_expired(using: str, now: datetime) -> int:
    """Delete retained events past their time and idle key locks (run by gc); return events deleted."""
    deleted = (
        RetainedEvent.objects.using(using).filter(expires_at__lte=now).delete()[1].get(RetainedEvent._meta.label, 0)
    )
    EventKeyLock.objects.using(using).filter(used_at__lt=now - LOCK_IDLE).delete()
    return deleted
