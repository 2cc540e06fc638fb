"""The runner's half of the push path: LISTEN for the due-now hints :mod:`django_wakes.engine.notify` sends.

Every hint is lossy and never load-bearing: a runner that misses one still finds the wake on its next
planned pass, so the listener reconnects after a pause and meanwhile the poll covers the gap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from django.db import connections

from ..engine.notify import CHANNEL
from ..logs import running_as
from .outage import OutageLog


class Listener(threading.Thread):
    """LISTEN for due-now hints on a PostgreSQL connection of its own; call ``on_hint(due_at)``."""

    def __init__(self, alias: str, on_hint: Callable[[datetime | None], None], *, runner_id: str | None = None) -> None:
        """Listen on ``alias``: a direct connection (LISTEN does not work through a transaction pooler)."""
        super().__init__(name="django-wakes-listen", daemon=True)
        self.alias = alias
        self.on_hint = on_hint
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.outage = OutageLog("push listener (polling covers the gap)")
        self.runner_id = runner_id

    @staticmethod
    def supported(alias: str) -> bool:
        if connections[alias].vendor != "postgresql":
            return False
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        return is_psycopg3

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        if self.runner_id is None:
            self._listen()
            return
        with running_as(self.runner_id):  # its outage records carry the runner's id
            self._listen()

    def _listen(self) -> None:
        from datetime import UTC

        while not self.stopping.is_set():
            connection = connections[self.alias]  # this thread's own connection
            try:
                connection.ensure_connection()
                raw = connection.connection
                raw.execute(f"LISTEN {CHANNEL}")
                back = self.outage.down
                self.outage.succeeded()
                self.ready.set()
                if back:  # hints sent while we were away are lost, and the database is back: look now
                    self.on_hint(None)
                while not self.stopping.is_set():
                    for notice in raw.notifies(timeout=0.5):
                        try:
                            due = datetime.fromtimestamp(int(notice.payload) / 1000, tz=UTC)
                        except ValueError:
                            due = None
                        self.on_hint(due)
            except Exception as exc:  # reconnect after a pause; meanwhile the poll covers us
                self.stopping.wait(min(self.outage.failed(exc), 2.0))
            finally:
                connection.close()
