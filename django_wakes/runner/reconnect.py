"""After a database outage, settle what is held before re-driving what lapsed while the database was away.

While the database is away no runner can renew a lease, so every lease in hand lapses if the outage
outlasts it, including those of live runners that finished a sink and hold its outcome until they
can settle it. Whoever reaches the database first would take those wakes over and run their sinks
again. So a runner that has seen its database unreachable (a pass, its heartbeat or its registration
failed with a transient error; a runner booted during the outage has too) claims due wakes as soon as
the database answers, but takes over no lapsed lease until :attr:`Reconnect.takeover_grace` after it
last reached the database again. Meanwhile every live holder's heartbeat (tried at least every
heartbeat period through the outage) renews the leases it holds, and its settle (tried with backoff
capped at :data:`~django_wakes.transient.BACKOFF_CAP`) lands; a renewed lease is no longer lapsed.
What is still lapsed after the grace belongs to a runner that died: it is re-driven then.

A runner booted after the outage ended cannot tell one happened; it takes over at once, as after any
boot. That window is the outage's end to the holders' first heartbeat (at most one heartbeat period).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from ..transient import BACKOFF_CAP
from .outage import OutageLog

logger = logging.getLogger("django_wakes")


class Reconnect:
    """Whether this runner may take over lapsed leases now (a part of :class:`~.sweeper.Sweeper`)."""

    lease: timedelta
    runner_id: str
    _passes: OutageLog
    _beats: OutageLog
    _registration: OutageLog
    _holding_back: bool

    @property
    def heartbeat_period(self) -> float:
        return max(min(self.lease.total_seconds() / 3, 10.0), 0.05)

    @property
    def takeover_grace(self) -> float:
        """Seconds after the database is back before this runner takes over lapsed leases.

        The longer of: a lease (what any holder gets to renew, counted again from the reconnect,
        since nobody could renew during the outage), and the backoff cap plus two heartbeat periods
        (a live holder's settle retry lands within the cap, its heartbeat within a period, and one
        more period for the round trip and the connection it makes first).
        """
        return max(self.lease.total_seconds(), BACKOFF_CAP + 2 * self.heartbeat_period)

    def may_take_over(self) -> bool:
        """False while the database is unreachable, and for :attr:`takeover_grace` after it is back."""
        logs = (self._passes, self._beats, self._registration)
        now = time.monotonic()
        wait = 0.0
        for log in logs:
            if log.down:
                wait = float("inf")
            elif log.back_at is not None:
                wait = max(wait, log.back_at + self.takeover_grace - now)
        holding_back = wait > 0
        if holding_back and not self._holding_back:
            logger.warning(
                "runner %s: the database was unreachable; taking over no lapsed lease for %.1fs after it is "
                "back, so live runners settle and renew what they hold first",
                self.runner_id,
                self.takeover_grace,
            )
        elif self._holding_back and not holding_back:
            logger.info("runner %s: taking over lapsed leases again", self.runner_id)
        self._holding_back = holding_back
        return not holding_back
