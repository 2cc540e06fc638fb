"""The runner registry: each ``runwakes`` process keeps a :class:`~django_wakes.models.Runner` row fresh.

Operators read it (admin, ``wakes status``); liveness is decided by
:meth:`~django_wakes.querysets.RunnerQuerySet.live` alone.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from .. import clock
from ..models import Runner
from ..querysets import stale_after
from .shared import db_alias

#: A runner row this many stale periods old is deleted by the heartbeat of any live runner.
AGE_OUT_FACTOR = 10


def register(runner_id: str, kinds: list[str] | None = None) -> None:
    """Create (or refresh) this process's row, with its host, pid and the kinds it has sinks for.

    ``kinds`` is what the admin's "unwakeable" filter reads: the admin process's own registry may
    differ from the runners' (sinks registered only where runwakes runs).
    """
    now = clock.now()
    Runner.objects.using(db_alias()).update_or_create(
        pk=runner_id,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": now,
            "heartbeat_at": now,
            "kinds": sorted(kinds) if kinds is not None else None,
        },
    )


def beat(runner_id: str, lease: timedelta) -> None:
    """Mark this runner alive now, and delete rows of runners long dead (they age out)."""
    now = clock.now()
    rows = Runner.objects.using(db_alias())
    rows.filter(pk=runner_id).update(heartbeat_at=now)
    rows.filter(heartbeat_at__lt=now - stale_after(lease) * AGE_OUT_FACTOR).delete()


def deregister(runner_id: str) -> None:
    """Delete this runner's row on a clean exit."""
    Runner.objects.using(db_alias()).filter(pk=runner_id).delete()
