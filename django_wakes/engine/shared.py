"""What every stage of the engine shares: the database it writes to, time arithmetic, token hashing."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from django.db import OperationalError, connections, router

from ..exceptions import InvalidDuration
from ..models import Wake

logger = logging.getLogger("django_wakes")

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


def after(now: datetime, delta: timedelta, *, name: str) -> datetime:
    """``now + delta``, refusing a duration that runs off the calendar (year 9999) as bad input."""
    try:
        return now + delta
    except OverflowError as exc:
        raise InvalidDuration(f"{name}: {delta} from now is beyond the last representable date") from exc


def earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


def ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def retry_rolled_back(label: str, work: Callable[[], T], *, tries: int = ROLLBACK_TRIES) -> T:
    """Run the transaction ``work``, trying again (with jittered backoff) when the database aborts it.

    A deadlock or lock timeout between racing runners rolls the whole transaction back, so running
    it again is safe; every write in the engine is conditional (state, claim token), so a retry
    after an ambiguous failure can only lose its race, never apply twice.
    """
    using = db_alias()
    for attempt in range(1, tries + 1):
        try:
            return work()
        except OperationalError as exc:
            if attempt == tries or connections[using].in_atomic_block:
                raise
            logger.info("%s was rolled back (%s); retrying", label, exc)
            connections[using].close_if_unusable_or_obsolete()
            time.sleep(random.uniform(0, 0.02 * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover
