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

from .. import clock
from ..conf import wakes_settings
from ..durations import Duration, parse_duration
from ..events import WEBHOOK_TOLERANCE, matches
from ..exceptions import InvalidDuration
from ..models import EventKeyLock, RetainedEvent, WebhookDelivery
from .shared import db_alias, lock_or_create, logger

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


def forget_deliveries(older_than: Duration, *, batch: int = 1000) -> int:
    """Delete the delivery ids accepted more than ``older_than`` ago; return how many.

    A delivery's timestamp was within :data:`~django_wakes.events.WEBHOOK_TOLERANCE` of its arrival and a
    replay must be within it too, so an id older than twice the tolerance can never be replayed
    successfully: a shorter ``older_than`` raises :class:`~django_wakes.exceptions.InvalidDuration`.
    Two things still want ids kept longer (gc keeps them 30 days): a sender's own retry of a delivery
    whose 200 was lost comes re-signed, days later, and must be answered as a duplicate; and GitHub
    signs no timestamp, so a forgotten GitHub id lets a captured request verify again.
    """
    keep = parse_duration(older_than, name="older_than")
    if keep < 2 * WEBHOOK_TOLERANCE:
        raise InvalidDuration(f"older_than: {keep} is less than twice the webhook tolerance ({2 * WEBHOOK_TOLERANCE})")
    cutoff = clock.now() - keep
    using = db_alias()
    total = 0
    while True:
        ids = list(
            WebhookDelivery.objects.using(using).filter(received_at__lt=cutoff).values_list("pk", flat=True)[:batch]
        )
        if not ids:
            return total
        total += WebhookDelivery.objects.using(using).filter(pk__in=ids).delete()[0]
