"""The sweeper behind ``manage.py runwakes``: recover on boot, then pass after pass until stopped.

Between passes a runner sleeps until the earliest of: the next known due time (``fire_at``,
``expires_at``, a lapsing lease), the polling interval (the backstop that cannot miss), or a push
hint (a wake created due-now in this process, or a PostgreSQL NOTIFY). Leases of the wakes in hand
are renewed by a heartbeat so a slow sink is not re-driven; the heartbeat also keeps this runner's
row in :class:`~django_wakes.models.Runner` fresh for operators.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from datetime import datetime, timedelta
from types import FrameType

from django.db import connections

from . import clock, engine, push
from .conf import wakes_settings
from .engine import Claim, RunReport, runners
from .states import Disposition

logger = logging.getLogger("django_wakes")


class Sweeper:
    """Claim and fire due wakes until :meth:`stop`; the ``runwakes`` command builds and runs one.

    Named for what it does (it sweeps the table for due wakes); the :class:`~django_wakes.models.Runner`
    model is the registry row each sweeper keeps fresh for operators."""

    def __init__(
        self,
        *,
        interval: float | None = None,
        batch: int | None = None,
        concurrency: int = 1,
        lease: timedelta | None = None,
        listen: bool = True,
        gc_every: timedelta | None = timedelta(hours=1),
        lanes: list[str] | None = None,
        shutdown_timeout: float = 30.0,
        settle_window: float = 0.05,
        runner_id: str | None = None,
    ) -> None:
        self.interval = interval if interval is not None else wakes_settings.poll_interval
        self.batch = batch or wakes_settings.batch
        self.concurrency = max(1, concurrency)
        self.lease = lease or wakes_settings.lease
        self.listen = listen
        self.gc_every = gc_every
        self.lanes = lanes
        self.shutdown_timeout = shutdown_timeout
        self.settle_window = settle_window
        self.runner_id = runner_id or engine.default_runner_id()
        self.stopping = threading.Event()
        # Set only when run() is done with the wakes in hand: the heartbeat outlives stop(), so a
        # wake finishing during a graceful shutdown keeps its lease and is not re-driven elsewhere.
        self._finished = threading.Event()
        self._wakeup = threading.Event()
        self._in_hand: dict[int, Claim] = {}
        self._in_hand_lock = threading.Lock()
        # --concurrency > 1: claimed wakes wait in this queue for the fire threads (each keeps its own
        # database connection for its whole life). unfinished_tasks counts queued + firing wakes.
        self._queue: queue.Queue[Claim | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        # The first gc comes a minute after boot (or sooner if gc_every is shorter), so a runner
        # that is restarted more often than gc_every still collects.
        first_gc = 60.0 if gc_every is None else min(60.0, gc_every.total_seconds())
        self._next_gc = time.monotonic() + first_gc
        # When the sleeping loop means to wake up; None while a pass runs (then every nudge counts).
        self._planned: datetime | None = None
        self.totals = RunReport()

    # -- control ---------------------------------------------------------------------------------

    def nudge(self, at: datetime | None = None) -> None:
        """Wake the loop early: a wake is due at ``at`` (now if ``None``).

        A hint later than the loop's planned wake-up is ignored: the loop gets there anyway.
        """
        planned = self._planned
        if at is None or planned is None or at < planned:
            self._wakeup.set()

    def stop(self) -> None:
        """Stop claiming; the wakes in hand are finished (within ``shutdown_timeout``)."""
        self.stopping.set()
        self._wakeup.set()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            if self.stopping.is_set():
                logger.warning("second signal %s: exiting at once; leases of wakes in hand will lapse", signum)
                os._exit(1)
            logger.info("signal %s: no new claims; finishing %d wake(s) in hand", signum, len(self._in_hand))
            self.stop()
            timer = threading.Timer(self.shutdown_timeout, self._give_up)
            timer.daemon = True
            timer.start()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _give_up(self) -> None:
        logger.warning(
            "shutdown timeout (%.0fs): exiting with %d wake(s) in hand; their leases will lapse",
            self.shutdown_timeout,
            len(self._in_hand),
        )
        os._exit(0)

    # -- one pass --------------------------------------------------------------------------------

    def run_once(self) -> RunReport:
        """Claim one batch and fire it here with the engine's pass loop; used by ``--once`` and the demo.

        Claims still unstarted when a stop is requested are handed back, uncharged.
        """
        drop_broken_connections()
        claims = self._claim(self.batch)
        report = engine.fire_claims(
            claims, settle_window=self.settle_window, should_stop=self.stopping.is_set, on_settled=self._settled
        )
        if len(claims) < self.batch:
            engine.observe_unwakeable()
        report.next_at = engine.next_due_at()
        return report

    def _settled(self, claim: Claim, outcome: engine.FireOutcome) -> None:
        """Drop a settled claim from the leases the heartbeat renews, and count it."""
        with self._in_hand_lock:
            self._in_hand.pop(claim.wake.pk, None)
            self.totals.add(claim.wake.pk, outcome)
            self.totals.outcomes.clear()  # a runner's life is long: keep the counts, not every id

    @property
    def fired(self) -> int:
        return self.totals.fired + self.totals.expired

    @property
    def failed(self) -> int:
        return self.totals.failed

    def _claim(self, limit: int) -> list[Claim]:
        """Claim up to ``limit`` wakes (lapsed leases first); they are in hand, so the heartbeat renews them."""
        claims = engine.claim_batch(runner_id=self.runner_id, limit=limit, lanes=self.lanes, lease=self.lease)
        with self._in_hand_lock:
            for claim in claims:
                self._in_hand[claim.wake.pk] = claim
        takeovers = sum(1 for claim in claims if claim.takeover)
        if takeovers:
            logger.info("re-driving %d wake(s) whose lease had lapsed", takeovers)
        return claims

    def _fire(self, claim: Claim) -> engine.FireOutcome:
        try:
            outcome = engine.fire(claim)
        except BaseException:
            with self._in_hand_lock:
                self._in_hand.pop(claim.wake.pk, None)
            raise
        self._settled(claim, outcome)
        return outcome

    def _release(self, claim: Claim) -> None:
        engine.release(claim)
        self._settled(claim, engine.FireOutcome(Disposition.RELEASED, settled=True))

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        """Register, recover lapsed leases, then loop until stopped; always deregister on the way out."""
        push.register_local(self)
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="django-wakes-heartbeat", daemon=True)
        listener = None
        alias = engine.db_alias()
        if self.listen and push.Listener.supported(alias):
            listener = push.Listener(alias, self.nudge)
            listener.start()
        if self.concurrency > 1:
            self._workers = [
                threading.Thread(target=self._fire_worker, name=f"django-wakes-fire-{n}", daemon=True)
                for n in range(self.concurrency)
            ]
            for worker in self._workers:
                worker.start()
        try:
            self._register()
            heartbeat.start()
            # Boot recovery is the first pass: claim_batch takes over lapsed leases before anything
            # else, and through _claim they are in hand, with this runner's lease and heartbeat
            # (engine.recover would fire them under WAKES['LEASE'] with no renewal).
            while not self.stopping.is_set():
                self._maybe_gc()
                next_at, busy = self._pass()
                if self.stopping.is_set():
                    break
                if busy:
                    continue
                self._sleep_until(next_at)
            self._drain()
        finally:
            push.unregister_local(self)
            if listener is not None:
                listener.stop()
            self.stopping.set()
            self._finished.set()
            self._wakeup.set()
            for _ in self._workers:
                self._queue.put(None)
            self._deregister()
            connections.close_all()

    def _pass(self) -> tuple[datetime | None, bool]:
        """Run one pass; return the next known due time and whether to go again at once."""
        self._planned = None
        self._wakeup.clear()
        if not self._workers:
            report = self.run_once()
            return report.next_at, report.claimed >= self.batch
        drop_broken_connections()
        if self._queue.unfinished_tasks >= self.concurrency:
            self._wakeup.wait(self.interval)  # every fire thread is busy; one finishing sets _wakeup
            return None, True
        claims = self._claim(self.batch)
        for claim in claims:
            self._queue.put(claim)
        if len(claims) < self.batch:
            engine.observe_unwakeable()
        if claims:
            return None, True
        return engine.next_due_at(), False

    def _fire_worker(self) -> None:
        """Fire claims from the queue until told to stop; unstarted claims are handed back on shutdown."""
        try:
            while True:
                claim = self._queue.get()
                try:
                    if claim is None:
                        return
                    if self.stopping.is_set():
                        self._release(claim)
                    else:
                        self._fire(claim)
                except Exception:  # the lease lapses and another pass re-drives it
                    logger.exception("firing wake %s crashed its fire thread's step", claim.wake.pk if claim else "?")
                    drop_broken_connections()
                finally:
                    self._queue.task_done()
                    self._wakeup.set()
        finally:
            connections.close_all()

    def _sleep_until(self, next_at: datetime | None) -> None:
        seconds = self.interval
        if next_at is not None:
            seconds = min(max((next_at - clock.now()).total_seconds(), 0.0), self.interval)
            if seconds == 0.0:
                # Due but not claimable by us now (lane busy, leases held): back off briefly.
                seconds = min(self.interval, 0.05)
        self._planned = clock.now() + timedelta(seconds=seconds)
        self._wakeup.wait(seconds)

    def _drain(self) -> None:
        """Wait (at most ``shutdown_timeout``) for the fire threads to finish or hand back their claims."""
        if not self._workers:
            return
        logger.info("waiting for %d wake(s) in hand", self._queue.unfinished_tasks)
        for _ in self._workers:
            self._queue.put(None)
        deadline = time.monotonic() + self.shutdown_timeout
        for worker in self._workers:
            worker.join(max(deadline - time.monotonic(), 0.0))

    def _maybe_gc(self) -> None:
        gc_after = wakes_settings.gc_after
        if self.gc_every is None or gc_after is None or time.monotonic() < self._next_gc:
            return
        self._next_gc = time.monotonic() + self.gc_every.total_seconds()
        deleted = engine.gc(older_than=gc_after)
        if deleted:
            logger.info("gc deleted %d terminal wake(s) older than %s", deleted, gc_after)

    # -- heartbeat and registration --------------------------------------------------------------

    @property
    def heartbeat_period(self) -> float:
        return max(min(self.lease.total_seconds() / 3, 10.0), 0.05)

    def _heartbeat_loop(self) -> None:
        try:
            while not self._finished.wait(self.heartbeat_period):
                try:
                    self.heartbeat()
                except Exception:  # the next beat tries again; a lapsed lease is the worst case
                    logger.warning("heartbeat failed", exc_info=True)
                    connections.close_all()
        finally:
            connections.close_all()

    def heartbeat(self) -> int:
        """Renew the leases of the wakes in hand and this runner's row; return leases renewed."""
        with self._in_hand_lock:
            in_hand = list(self._in_hand.values())
        renewed = engine.renew_leases(in_hand, self.lease)
        runners.beat(self.runner_id, self.lease)
        return renewed

    def _register(self) -> None:
        runners.register(self.runner_id)

    def _deregister(self) -> None:
        try:
            runners.deregister(self.runner_id)
        except Exception:  # the row ages out by itself
            logger.debug("could not deregister runner %s", self.runner_id, exc_info=True)


def drop_broken_connections() -> None:
    """Close this thread's database connections that errored and are no longer usable.

    Unlike ``close_old_connections()``, a healthy connection is kept whatever ``CONN_MAX_AGE`` says:
    a runner is one long-lived client, and reconnecting every pass costs milliseconds of latency.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block and conn.errors_occurred:
            if not conn.is_usable():
                conn.close()
            else:
                conn.errors_occurred = False
