"""What every stage of the engine shares: the database it writes to, time arithmetic, token hashing."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import IntegrityError, connections, router, transaction
from django.db.models import Model, QuerySet

from .. import signals
from ..durations import plain_duration
from ..exceptions import InvalidDuration
from ..logs import firing_wake as firing_wake  # re-exported: the engine's stages import both from here
from ..logs import logger as logger
from ..models import Wake
from ..transient import BACKOFF_CAP as BACKOFF_CAP  # re-exported: the engine's and the runner's names for them
from ..transient import TRANSIENT_ERRORS as TRANSIENT_ERRORS
from ..transient import backoff_delay as backoff_delay
from ..transient import drop_broken_connections as drop_broken_connections
from ..transient import is_outage as is_outage

T = TypeVar("T")


#: How often a transaction the database aborted (deadlock, lock timeout) is tried again.
ROLLBACK_TRIES = 6


def db_alias() -> str:
    """The database alias every wake write goes to (``router.db_for_write``: multi-database projects work)."""
    return router.db_for_write(Wake)


def hash_token(token: str) -> str:
    """Return the stored form of an approval token: its SHA-256, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_claim_token() -> str:
    """A fresh fencing token for one claim: a late finisher holding an older one is refused."""
    return secrets.token_hex(16)


def default_runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


M = TypeVar("M", bound=Model)


def lock_or_create(rows: QuerySet[M], lookup: dict[str, Any], defaults: dict[str, Any] | None = None) -> M:
    """Lock the row ``lookup`` names until the transaction ends, inserting it first if it is missing.

    Locks first and inserts only when there is nothing to lock: an insert that meets an existing row
    takes a shared lock on MySQL, and two of those upgrading to the exclusive lock deadlock. A racing
    insert of the same row waits for the first, fails its unique check and locks the winner's row.
    """
    row = rows.select_for_update().filter(**lookup).first()
    if row is not None:
        return row
    try:
        with transaction.atomic(using=rows.db):
            rows.create(**lookup, **(defaults or {}))
    except IntegrityError:
        pass
    return rows.select_for_update().get(**lookup)


def announce_due(using: str, now: datetime) -> None:
    """Send :data:`~django_wakes.signals.wakes_due` once the current transaction commits: wakes became due now.

    A runner in this process is nudged by it (and hosts may hook it); sent on commit, so nobody is
    told about a change that rolled back.
    """
    transaction.on_commit(lambda: signals.wakes_due.send(sender=Wake, due_at=now), using=using)


def after(now: datetime, delta: timedelta, *, name: str) -> datetime:
    """``now + delta``, refusing a duration that runs off the calendar (year 9999) as bad input."""
    try:
        return now + delta
    except OverflowError as exc:
        raise InvalidDuration(f"{name}: {plain_duration(delta)} from now is beyond the year 9999") from exc


def earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


def ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def retry_rolled_back(label: str, work: Callable[[], T], *, tries: int | None = ROLLBACK_TRIES) -> T:
    """Run the transaction ``work``, trying again (with jittered backoff) when the database aborts it.

    A deadlock, lock timeout, lost connection or read-only period rolls the whole transaction back,
    so running it again is safe; every write in the engine is conditional (state, claim token), so a
    retry after an ambiguous failure can only lose its race, never apply twice. ``tries=None`` tries
    until it succeeds (a runner settling a sink that already ran: the effect happened, so the settle
    must not be dropped); it logs once when the database goes away and once when it is back.
    """
    using = db_alias()
    attempt = 0
    while True:
        attempt += 1
        try:
            result = work()
        except TRANSIENT_ERRORS as exc:
            if (tries is not None and attempt >= tries) or connections[using].in_atomic_block:
                raise
            level = logging.WARNING if attempt == 3 else logging.INFO
            logger.log(level, "%s failed (%s: %s); trying again", label, type(exc).__name__, exc)
            drop_broken_connections()
            time.sleep(backoff_delay(attempt))
            continue
        if attempt > 3:
            logger.warning("%s succeeded after %d tries", label, attempt)
        return result
