"""Real connection cuts for tests on the shared PostgreSQL and MariaDB servers.

:func:`kill_connection` ends this thread's connection from the server side, from a second
connection (``pg_terminate_backend``, ``KILL CONNECTION``): the next statement on it fails as after
a failover or a restart. :func:`through_proxy` routes an alias through a
:class:`~tests.fault_servers.TcpProxy`, whose :meth:`~tests.fault_servers.TcpProxy.cut` resets every
connection and refuses new ones until :meth:`~tests.fault_servers.TcpProxy.heal`: the database away
for as long as the test says. Neither works on SQLite (no server): tests skip there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connections

from tests.fault_servers import TcpProxy

DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}


def needs_a_server(alias: str = "default") -> None:
    """Skip on SQLite: there is no server to cut the connection from."""
    if connections[alias].vendor not in DEFAULT_PORTS:
        pytest.skip("a connection cut needs a database server (PostgreSQL or MariaDB)")


def kill_connection(alias: str = "default") -> None:
    """End this thread's connection to ``alias`` from the server side; its next statement fails."""
    conn = connections[alias]
    conn.ensure_connection()
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()" if conn.vendor == "postgresql" else "SELECT CONNECTION_ID()")
        (backend,) = cursor.fetchone()
    killer = connections.create_connection(alias)
    try:
        with killer.cursor() as cursor:
            if conn.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
            else:
                cursor.execute(f"KILL CONNECTION {int(backend)}")
    finally:
        killer.close()


@contextmanager
def through_proxy(alias: str = "default") -> Iterator[TcpProxy]:
    """Point ``alias`` at a :class:`TcpProxy` in front of its server for the block (every thread's connection)."""
    conn = connections[alias]
    config = conn.settings_dict  # one dict shared by every thread's wrapper of the alias
    saved = config["HOST"], config["PORT"]
    proxy = TcpProxy(int(config["PORT"] or DEFAULT_PORTS[conn.vendor]), target_host=config["HOST"] or "127.0.0.1")
    proxy.start()
    conn.close()
    config["HOST"], config["PORT"] = "127.0.0.1", str(proxy.port)
    try:
        yield proxy
    finally:
        proxy.heal()
        conn.close()
        config["HOST"], config["PORT"] = saved
        proxy.stop()
