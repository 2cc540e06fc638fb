"""Bounded network timeouts for a runner's database connections (a cut-off runner must notice)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import connections

from ..conf import wakes_settings


def apply_client_timeouts(timeout: timedelta | None = None) -> None:
    """Give this process's connections bounded network timeouts, where the project set none.

    ``runwakes`` calls it at start-up (it changes the process's database settings, so it is not
    done by :class:`Sweeper` itself, which also runs inside other processes: tests, the demo).

    A runner cut off from its database must notice within a bounded time rather than hang in a
    read forever. PostgreSQL (libpq): ``connect_timeout``, TCP keepalives and ``tcp_user_timeout``;
    MariaDB/MySQL (mysqlclient): ``connect_timeout``, ``read_timeout``, ``write_timeout``. Values the
    project put in ``OPTIONS`` win. ``WAKES['RUNNER_DB_TIMEOUT']`` (default 30 s; ``None``: leave the
    driver's defaults) sets them; note that a sink's own query running longer than it on MariaDB
    is cut off too.
    """
    timeout = timeout if timeout is not None else wakes_settings.runner_db_timeout
    if timeout is None:
        return
    seconds = max(1, int(timeout.total_seconds()))
    for alias in connections:
        config: dict[str, Any] = connections.settings[alias]
        options = config.setdefault("OPTIONS", {})
        vendor = config.get("ENGINE", "")
        if vendor.endswith("postgresql"):
            options.setdefault("connect_timeout", min(seconds, 10))
            options.setdefault("keepalives", 1)
            options.setdefault("keepalives_idle", max(1, seconds // 6))
            options.setdefault("keepalives_interval", max(1, seconds // 10))
            options.setdefault("keepalives_count", 3)
            options.setdefault("tcp_user_timeout", seconds * 1000)
        elif vendor.endswith("mysql"):
            options.setdefault("connect_timeout", min(seconds, 10))
            options.setdefault("read_timeout", seconds)
            options.setdefault("write_timeout", seconds)
        else:
            continue
        existing = connections[alias]
        if existing.connection is not None and not existing.in_atomic_block:
            existing.close()  # reconnect with the new options
