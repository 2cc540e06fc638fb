"""The sweeper loop behind ``manage.py runwakes``: recover on boot, then pass after pass."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from types import FrameType

from django.db import close_old_connections, connections

from . import clock, engine
from .engine import RunReport

logger = logging.getLogger("django_wakes")


class Runner:
    """Run passes until told to stop; the command builds one of these and calls :meth:`run`.

    Between passes it sleeps until the earliest known due time, at most ``interval`` seconds
    (the polling backstop that cannot miss), and wakes early when :meth:`nudge` is called.
    """

    def __init__(
        self,
        *,
        interval: float = 1.0,
        batch: int | None = None,
        runner_id: str | None = None,
        lanes: list[str] | None = None,
    ) -> None:
        self.interval = interval
        self.batch = batch
        self.runner_id = runner_id or engine.default_runner_id()
        self.lanes = lanes
        self.stopping = threading.Event()
        self._nudged = threading.Event()
        self.failed = 0
        self.fired = 0

    def nudge(self) -> None:
        """Wake the loop now (a wake became due in this process)."""
        self._nudged.set()

    def stop(self) -> None:
        """Stop claiming; the wake in hand is finished first."""
        self.stopping.set()
        self._nudged.set()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            if self.stopping.is_set():
                logger.warning("second signal: exiting at once")
                raise SystemExit(1)
            logger.info("signal %s: finishing the wake in hand, then exiting", signum)
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run_once(self) -> RunReport:
        close_old_connections()
        report = engine.run_due(limit=self.batch, runner_id=self.runner_id, lanes=self.lanes)
        self.fired += report.fired + report.expired
        self.failed += report.failed
        return report

    def run(self) -> None:
        recovered = engine.recover(runner_id=self.runner_id)
        if recovered:
            logger.info("recovered %d wake(s) with lapsed leases", recovered)
        try:
            while not self.stopping.is_set():
                report = self.run_once()
                if self.stopping.is_set():
                    break
                if report.claimed and report.claimed >= (self.batch or 1):
                    continue  # a full batch: there may be more due right now
                self._sleep(self._sleep_seconds(report.next_at, claimed=report.claimed))
        finally:
            connections.close_all()

    def _sleep_seconds(self, next_at: datetime | None, *, claimed: int) -> float:
        if next_at is None:
            return self.interval
        seconds = (next_at - clock.now()).total_seconds()
        if seconds <= 0:
            # Due but not claimable (lane busy, lease not ours): let the backstop come round.
            return 0.0 if claimed else min(self.interval, 0.05)
        return min(seconds, self.interval)

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._nudged.wait(seconds)
        self._nudged.clear()
