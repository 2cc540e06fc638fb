"""Announce due-now wakes: the sending half of the push path (the runner's listener is the other half).

Every hint is lossy and never load-bearing: a runner that misses one still finds the wake on its
next planned pass (it sleeps until the next known due time, at most the polling interval).

- In-process: runners (:mod:`django_wakes.runner`) register here and are nudged directly (any database).
- PostgreSQL: a ``NOTIFY django_wakes, '<due epoch ms>'``, and runners ``LISTEN`` on a connection of
  their own. A create sends it *inside* its transaction (:func:`notify_in_transaction`), so
  PostgreSQL delivers it the moment the wake commits, with no round trip after the commit (and
  never for a create that rolled back); a trigger (an event, an answer) sends it after its commit.
"""

from __future__ import annotations

import logging
import threading
import weakref
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router

from .. import clock, signals
from ..conf import wakes_settings

logger = logging.getLogger("django_wakes")

CHANNEL = "django_wakes"

_local_runners: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()


def register_local(runner: Any) -> None:
    """Nudge ``runner`` (anything with ``nudge(at)``) whenever a wake becomes due in this process."""
    with _lock:
        _local_runners.add(runner)


def unregister_local(runner: Any) -> None:
    with _lock:
        _local_runners.discard(runner)


def _horizon() -> timedelta:
    return timedelta(seconds=wakes_settings.poll_interval)


def hint(due_at: datetime | None, *, using: str | None = None) -> None:
    """Announce that a wake is due at ``due_at``.

    Runners in this process always hear it (each ignores a hint later than its planned wake-up).
    The NOTIFY is skipped beyond the polling horizon: remote runners will see the wake on a planned
    pass anyway, and sleeping until the next known due time lands them on it.
    """
    if due_at is None:
        return
    nudge_local(due_at)
    connection = notify_connection(due_at, using)
    if connection is None:
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload(due_at)])
    except Exception:  # a lost hint only delays the wake to the next poll
        logger.debug("NOTIFY failed; the polling backstop will pick the wake up", exc_info=True)


def nudge_local(due_at: datetime) -> None:
    """Nudge the runners of this process (each ignores a hint later than its planned wake-up)."""
    with _lock:
        runners = list(_local_runners)
    for runner in runners:
        runner.nudge(due_at)


def notify_in_transaction(due_at: datetime | None, using: str) -> bool:
    """Send the NOTIFY for a wake due at ``due_at`` inside the creating transaction; return whether sent.

    PostgreSQL delivers it when that transaction commits (not at all if it rolls back), so a runner
    hears of the wake with no round trip after the commit. Call it with the transaction open; the
    in-process nudge still comes on commit (``wake_created``). ``False``: nothing to send (another
    database, or due beyond the polling horizon).
    """
    if due_at is None:
        return False
    connection = notify_connection(due_at, using)
    if connection is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload(due_at)])
    return True


def payload(due_at: datetime) -> str:
    return str(int(due_at.timestamp() * 1000))


def notify_connection(due_at: datetime, using: str | None) -> Any:
    """The PostgreSQL connection to NOTIFY on, or ``None`` (another database, or due beyond the horizon)."""
    if due_at > clock.now() + _horizon():
        return None
    from ..models import Wake

    connection = connections[using or router.db_for_write(Wake)]
    return connection if connection.vendor == "postgresql" else None


#: Set on a wake whose NOTIFY went out inside its creating transaction: on commit only the nudge is left.
NOTIFIED = "_wakes_notified"


def _on_created(sender: Any, wake: Any, **kwargs: Any) -> None:
    if getattr(wake, NOTIFIED, False):
        if wake.due_at is not None:
            nudge_local(wake.due_at)
        return
    hint(wake.due_at, using=wake._state.db)


def _on_due(sender: Any, due_at: datetime, **kwargs: Any) -> None:
    hint(due_at)


def connect() -> None:
    signals.wake_created.connect(_on_created, dispatch_uid="django_wakes.engine.notify.created")
    signals.wakes_due.connect(_on_due, dispatch_uid="django_wakes.engine.notify.due")
