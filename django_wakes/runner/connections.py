"""A runner's database connections: bounded network timeouts (a cut-off runner must notice), and a
start-up that does not wait on another process's SQLite write lock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import OperationalError, connections

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


def probe_sqlite_json_support() -> None:
    """Learn whether each SQLite database has JSON functions with a plain read, before the system checks.

    Django finds out (``features.supports_json_field``, asked by the JSONField check that Django 6
    runs for every command) inside ``atomic()``; with ``"transaction_mode": "IMMEDIATE"`` that takes
    SQLite's write lock, so a runner started while another runner holds it past the busy timeout was
    told ``fields.E180 SQLite does not support JSONFields`` and refused to start. ``SELECT JSON(...)``
    in autocommit reads no table and takes no lock; a database that really lacks JSON still fails
    here, and Django's own probe then answers as before.
    """
    for alias in connections:
        connection = connections[alias]
        if connection.vendor != "sqlite" or "supports_json_field" in connection.features.__dict__:
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute("""SELECT JSON('{"a": "b"}')""")
        except OperationalError:
            continue
        connection.features.supports_json_field = True
