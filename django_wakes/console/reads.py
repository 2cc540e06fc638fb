"""Where the console's read-only pages read from, and how far behind that database is.

The wake list, the dashboard and the Prometheus metrics only read, and on a busy console their
counts and scans are the heaviest queries the primary sees. ``WAKES["READ_DATABASE"]`` names a
``DATABASES`` alias — a streaming replica — that they read from instead. Nothing else does: the wake
page, every operator action (a POST), claims, settles and creates stay on the database wakes are
written to (``router.db_for_write``). A replica is behind by its replication lag, so the pages say how
far (:func:`replica_lag`); an operator action taken from a stale list is still decided on the primary
(every engine write is conditional), so it can only find that the wake has moved on.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DatabaseError, connections, router
from django.http import HttpRequest

from ..conf import wakes_settings
from ..models import Wake


def alias() -> str:
    """The alias the read-only pages query: ``READ_DATABASE``, else where Django reads wakes from."""
    return wakes_settings.read_database or router.db_for_read(Wake)


def for_listing(request: HttpRequest) -> bool:
    """Whether this admin request is the wake list being *read* (a GET), not an action posted from it."""
    match = request.resolver_match
    return (
        request.method in ("GET", "HEAD")
        and match is not None
        and (match.url_name or "").endswith("_changelist")
        and wakes_settings.read_database is not None
    )


@dataclass(frozen=True)
class ReplicaLag:
    """What the pages say about the database they read from, when ``READ_DATABASE`` is set."""

    alias: str
    replica: bool | None  # a standby / replica at all (None: it could not be asked)
    seconds: float | None  # how far its data is behind the primary's (None: unknown)
    receiving: bool | None  # whether it is receiving changes right now (None: unknown)
    error: str = ""

    @property
    def summary(self) -> str:
        """One line for a page or a log: the alias and how far behind it is."""
        if self.error:
            return f"{self.alias}: could not be asked how far behind it is ({self.error})"
        if self.replica is False:
            return f"{self.alias}: not a replica (reads see every committed change)"
        behind = "an unknown time behind" if self.seconds is None else f"{self.seconds:.1f}s behind"
        if self.receiving is False:
            return f"{self.alias}: {behind} of what it received, and receiving nothing: it may be further behind"
        return f"{self.alias}: {behind}"


#: On a standby: in recovery, how far replay is behind (0 when it has replayed all it received), and
#: whether the WAL receiver streams (NULL for a role that may not see pg_stat_wal_receiver).
_PG_LAG = """
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN 0
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp())
       END,
       (SELECT status = 'streaming' FROM pg_stat_wal_receiver)
"""


def replica_lag() -> ReplicaLag | None:
    """How far behind ``READ_DATABASE`` is; None when it is not set (the pages read the primary).

    PostgreSQL: replay lag of a standby (0 once it has replayed everything it received; if its WAL
    receiver is not streaming, "received" may itself be behind, and the summary says so).
    MySQL/MariaDB: ``Seconds_Behind_Master`` of ``SHOW REPLICA STATUS`` (needs the ``REPLICATION CLIENT``
    / ``SLAVE MONITOR`` privilege; without it the lag is unknown). SQLite has no replicas.
    """
    name = wakes_settings.read_database
    if name is None:
        return None
    conn = connections[name]
    try:
        with conn.cursor() as cursor:
            if conn.vendor == "postgresql":
                cursor.execute(_PG_LAG)
                in_recovery, seconds, streaming = cursor.fetchone()
                return ReplicaLag(name, bool(in_recovery), float(seconds) if seconds is not None else None, streaming)
            if conn.vendor == "mysql":
                cursor.execute("SHOW REPLICA STATUS")  # MariaDB 10.5.1+, MySQL 8.0.22+
                row = cursor.fetchone()
                if row is None:
                    return ReplicaLag(name, replica=False, seconds=0.0, receiving=None)
                status = dict(zip([column[0] for column in cursor.description], row, strict=True))
                seconds = status.get("Seconds_Behind_Master", status.get("Seconds_Behind_Source"))
                io = status.get("Slave_IO_Running", status.get("Replica_IO_Running"))
                return ReplicaLag(name, True, float(seconds) if seconds is not None else None, io == "Yes")
    except DatabaseError as exc:
        conn.close()
        return ReplicaLag(
            name,
            None,
            None,
            None,
            error=str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__,
        )
    return ReplicaLag(name, replica=False, seconds=0.0, receiving=None)
