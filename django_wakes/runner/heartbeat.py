"""The runner's heartbeat and registration: renewing the leases in hand, keeping its row fresh.

The heartbeat runs on its own thread and connection, outlives :meth:`~.sweeper.Sweeper.stop` (a
wake finishing during a graceful shutdown keeps its lease), and hands back unstarted claims once
stopping. A claim the renewal finds taken over by another runner is marked lost: its sink will not start.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connections

from .. import engine
from ..engine import TRANSIENT_ERRORS, runners
from ..engine.shared import drop_broken_connections
from ..sinks import registry
from .in_hand import InHand
from .outage import OutageLog

logger = logging.getLogger("django_wakes")


class Heartbeat(InHand):
    """Heartbeat, registration and deregistration (a part of :class:`~.sweeper.Sweeper`)."""

    _finished: threading.Event
    _beat_now: threading.Event
    _beats: OutageLog

    def _heartbeat_loop(self) -> None:
        try:
            while not self._finished.is_set():
                self._beat_now.wait(self.heartbeat_period)
                self._beat_now.clear()
                if self._finished.is_set():
                    return
                try:
                    if self.stopping.is_set():
                        self.hand_back_unstarted()
                    self.heartbeat()
                except TRANSIENT_ERRORS as exc:  # the next beat tries again; a lapsed lease is the worst case
                    drop_broken_connections()
                    self._beat_now.wait(min(self._beats.failed(exc), self.heartbeat_period))
                    continue
                except Exception:
                    logger.exception("heartbeat failed")
                    drop_broken_connections()
                    continue
                self._beats.succeeded()
        finally:
            connections.close_all()

    def heartbeat(self) -> int:
        """Renew the leases of the wakes in hand and this runner's row; return leases renewed.

        A claim the renewal finds taken over by another runner is marked lost: its sink will not start.
        """
        asked = time.monotonic()
        with self._in_hand_lock:
            in_hand = list(self._in_hand.values())
        held = engine.renew_leases(in_hand, self.lease)
        with self._in_hand_lock:
            for claim in in_hand:
                wake_id = claim.wake.pk
                if wake_id not in self._in_hand:
                    continue
                if wake_id in held:
                    self._confirmed[wake_id] = max(self._confirmed.get(wake_id, asked), asked)
                else:
                    self._lost.add(wake_id)
        runners.beat(self.runner_id, self.lease)
        return len(held)

    def hand_back_unstarted(self) -> int:
        """Release every claim in hand whose sink has not started (graceful shutdown); return how many."""
        with self._in_hand_lock:
            unstarted = [c for i, c in self._in_hand.items() if i not in self._started and i not in self._lost]
            self._lost.update(c.wake.pk for c in unstarted)  # may_start now says no to each of them
        released = sum(1 for claim in unstarted if engine.release(claim))
        if released:
            logger.info("handed back %d unstarted wake(s) on shutdown", released)
        return released

    def _register(self) -> None:
        """Register this runner, trying until the database answers (or a signal stops it)."""
        outage = self._registration
        while not self.stopping.is_set():
            try:
                runners.register(self.runner_id, kinds=registry.kinds())
            except TRANSIENT_ERRORS as exc:
                drop_broken_connections()
                self.stopping.wait(outage.failed(exc))
                continue
            outage.succeeded()
            return

    def _deregister(self) -> None:
        try:
            runners.deregister(self.runner_id)
        except Exception:  # the row ages out by itself
            logger.debug("could not deregister runner %s", self.runner_id, exc_info=True)
