"""Log a database outage twice — when it starts and when it ends — however many tries fail between.

A runner outlives its database's bad minutes by trying again with capped, jittered backoff; what an
operator needs from the log is one line saying it lost the database (and why), and one saying it is
back (and after how long), not a traceback per try.
"""

from __future__ import annotations

import logging
import threading
import time

from ..engine.shared import backoff_delay

logger = logging.getLogger("django_wakes")


class OutageLog:
    """The state of one activity's connection to the database (a runner's passes, its heartbeat, LISTEN)."""

    def __init__(self, activity: str) -> None:
        self.activity = activity
        self.since: float | None = None
        #: When (``time.monotonic()``) the last outage ended: None if none ended yet.
        self.back_at: float | None = None
        self.failures = 0
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> float:
        """Note a failed try; return how long to wait before the next one."""
        with self._lock:
            self.failures += 1
            first = self.since is None
            if first:
                self.since = time.monotonic()
        if first:
            logger.warning(
                "%s: database unavailable (%s: %s); retrying with backoff until it is back",
                self.activity,
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            )
        else:
            logger.debug("%s: still no database (%s)", self.activity, exc)
        return backoff_delay(self.failures)

    def succeeded(self) -> None:
        """Note a successful round trip; log the end of an outage if one was going on."""
        with self._lock:
            since, failures = self.since, self.failures
            self.since, self.failures = None, 0
            if since is not None:
                self.back_at = time.monotonic()
        if since is not None:
            logger.warning(
                "%s: database reachable again after %.1fs (%d failed tries)",
                self.activity,
                time.monotonic() - since,
                failures,
            )
