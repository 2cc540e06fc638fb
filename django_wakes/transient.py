"""Database errors a process outlives: which are transient, which say the database went away, how long to wait.

The engine retries a transaction the database rolled back (:func:`~django_wakes.engine.shared.retry_rolled_back`),
the runner and the push listener ride out outages, ``once()`` records an effect through one, and a sink
that meets one is retried uncharged: all of them judge an error, and pace their tries, from here.
"""

from __future__ import annotations

import random

from django.db import InterfaceError, InternalError, OperationalError, connections

#: Database errors a runner outlives: connection loss, restarts, failover, read-only periods,
#: deadlocks and lock timeouts. Anything else (IntegrityError, ProgrammingError) is a bug and is raised.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError, InternalError)

#: PostgreSQL SQLSTATEs that say the server went away or cannot take writes, not that a query was wrong:
#: class 08 (connection exception), admin/crash shutdown, "cannot connect now" (starting up, or a standby
#: being promoted), and a read-only transaction (a demoted primary, a hot standby).
_PG_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03", "25006")

#: MySQL/MariaDB client and server error numbers of the same kind: can't connect, server gone away or
#: lost mid-query, shutdown in progress, connection killed, running read-only.
_MYSQL_OUTAGE_CODES = frozenset({2002, 2003, 2006, 2013, 2055, 1053, 1927, 1290, 1836, 1792, 4031})


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says a database went away, rather than that the code talking to it was wrong.

    A sink that raises this (its own query met a failover, a restart, a read-only primary) is tried
    again without charging an attempt. Judged by the driver's own error (Django keeps it as
    ``__cause__``): a PostgreSQL connection failure or one of :data:`_PG_OUTAGE_STATES`, a MySQL/MariaDB
    error number in :data:`_MYSQL_OUTAGE_CODES`, or any ``InterfaceError`` (the connection object is
    closed). A deadlock, a lock timeout, a syntax error or SQLite's "database is locked" is not an
    outage: it is the sink's failure, charged as before.
    """
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if type(error).__name__ == "InterfaceError":
            return True
        module = type(error).__module__
        if module.startswith("psycopg"):  # psycopg 3 (sqlstate) and psycopg2 (pgcode)
            state = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
            if state is None:
                # A client-side failure has no SQLSTATE: connection refused or lost, "the connection is closed".
                return any(base.__name__ == "OperationalError" for base in type(error).__mro__)
            return str(state).startswith(_PG_OUTAGE_STATES)
        if module.startswith(("MySQLdb", "pymysql")):
            code = error.args[0] if error.args and isinstance(error.args[0], int) else None
            return code in _MYSQL_OUTAGE_CODES
        error = error.__cause__
    return False


#: The longest pause between two tries while the database is away.
BACKOFF_CAP = 5.0


def backoff_delay(attempt: int) -> float:
    """Capped, jittered exponential backoff: ~20 ms, 40 ms, ... up to :data:`BACKOFF_CAP` seconds."""
    return float(random.uniform(0.5, 1.0) * min(BACKOFF_CAP, 0.02 * 2 ** min(attempt, 20)))


def drop_broken_connections() -> None:
    """Close this thread's database connections that errored and are no longer usable.

    Unlike ``close_old_connections()``, a healthy connection is kept whatever ``CONN_MAX_AGE`` says:
    a runner is one long-lived client, and reconnecting every pass costs milliseconds of latency.
    The next query on a closed one reconnects.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block and conn.errors_occurred:
            if not conn.is_usable():
                conn.close()
            else:
                conn.errors_occurred = False
