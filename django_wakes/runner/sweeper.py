"""The sweeper behind ``manage.py runwakes``: recover on boot, then pass after pass until stopped.

Between passes a runner sleeps until the earliest of: the next known due time (``fire_at``,
``expires_at``, a lapsing lease), the polling interval (the backstop that cannot miss), or a push
hint (a wake created due-now in this process, or a PostgreSQL NOTIFY). Leases of the wakes in hand
are renewed by a heartbeat so a slow sink is not re-driven; the heartbeat also keeps this runner's
row in :class:`~django_wakes.models.Runner` fresh for operators.

A runner outlives its database's bad minutes: every pass, settle, heartbeat and registration that
fails with a transient database error (connection lost, restart, failover, read-only) is tried
again with capped, jittered backoff, logged once when the outage starts and once when it ends. Only
signals end a runner. And it starts a sink only while it *knows* its lease is good: each claim
remembers when its lease was last confirmed (claimed, or renewed by a heartbeat that saw the row
still held under its token); a claim whose confirmation is older than half the lease — the runner
stalled, or lost the database — is handed back unstarted instead of fired.
"""

from __future__ import annotations

import collections
import inspect
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from types import FrameType

from django.db import connections

from .. import clock, engine
from ..conf import wakes_settings
from ..engine import TRANSIENT_ERRORS, Claim, RunReport, notify
from ..engine.shared import drop_broken_connections
from ..logs import running_as
from ..sinks import registry
from .async_firer import AsyncFirer
from .fire_summary import FireSummary
from .fire_threads import FireThreads, RunnerBroken
from .heartbeat import Heartbeat
from .listener import Listener
from .outage import OutageLog

logger = logging.getLogger("django_wakes")
#: Logged at the first SIGINT/SIGTERM: what the runner does now, and how not to wait for it.
SIGNAL_HINT = "signal %s: no new claims; finishing %d wake(s) in hand; press Ctrl-C again to exit at once"


class Sweeper(FireThreads, Heartbeat):
    """Claim and fire due wakes until :meth:`stop`; the ``runwakes`` command builds and runs one.

    Named for what it does (it sweeps the table for due wakes); the :class:`~django_wakes.models.Runner`
    model is the registry row each sweeper keeps fresh for operators.
    """

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
        queues: list[str] | None = None,
        shutdown_timeout: float = 30.0,
        settle_window: float = 0.05,
        runner_id: str | None = None,
        when_reachable: Sequence[Callable[[], bool]] = (),
    ) -> None:
        self.interval = interval if interval is not None else wakes_settings.poll_interval
        self.batch = batch or wakes_settings.batch
        self.concurrency = max(1, concurrency)
        self.lease = lease or wakes_settings.lease
        self.listen = listen
        self.gc_every = gc_every
        self.lanes = lanes
        self.queues = queues
        self.shutdown_timeout = shutdown_timeout
        self.settle_window = settle_window
        self.runner_id = runner_id or engine.default_runner_id()
        # Boot jobs that could not reach the database (the periodic-task sync during an outage): each
        # is called again after every pass that reached it, until it returns True (done).
        self._when_reachable = list(when_reachable)
        self.stopping = threading.Event()
        # Set only when run() is done with the wakes in hand: the heartbeat outlives stop(), so a
        # wake finishing during a graceful shutdown keeps its lease and is not re-driven elsewhere.
        self._finished = threading.Event()
        self._wakeup = threading.Event()
        self._beat_now = threading.Event()
        # The claims in hand, and per claim (by wake id) what the runner knows locally: when its lease
        # was last confirmed (time.monotonic), whether its sink started, whether it was lost to
        # another runner. One lock guards all of it, so a sink never starts for a claim that the
        # heartbeat has just found lost or handed back.
        self._in_hand: dict[int, Claim] = {}
        self._confirmed: dict[int, float] = {}
        self._started: dict[int, float] = {}
        self._lost: set[int] = set()
        self._timed: set[int] = set()  # sinks whose duration sink_finished() already counted
        self._in_hand_lock = threading.Lock()
        # --concurrency > 1: claimed wakes wait in this queue for the fire threads (each keeps its own
        # database connection for its whole life). unfinished_tasks counts queued + firing wakes.
        self._queue: queue.Queue[Claim | None] = queue.Queue()
        self._workers: list[threading.Thread] = []
        # The claim each fire thread is working on, so a thread that dies is not left holding it.
        self._holding: dict[threading.Thread, Claim] = {}
        self._heartbeat: threading.Thread | None = None
        # --concurrency > 1: async def sinks are awaited together on one event loop instead; claims
        # for them wait here (claimed ahead, in hand) until a slot of the loop is free.
        self._async: AsyncFirer | None = None
        self._waiting: collections.deque[Claim] = collections.deque()
        # The first gc comes a minute after boot (or sooner if gc_every is shorter), so a runner
        # that is restarted more often than gc_every still collects.
        first_gc = 60.0 if gc_every is None else min(60.0, gc_every.total_seconds())
        self._next_gc = time.monotonic() + first_gc
        # When the sleeping loop means to wake up; None while a pass runs (then every nudge counts).
        self._planned: datetime | None = None
        self._sink_seconds = 0.0  # running average of sink durations, for planning batch sizes
        self._passes = OutageLog(f"runner {self.runner_id}")
        self._beats = OutageLog(f"runner {self.runner_id} heartbeat")
        self._registration = OutageLog(f"runner {self.runner_id} registration")
        self._holding_back = False  # taking over no lapsed lease after an outage (runner/reconnect.py)
        self.totals = RunReport()
        self._summary = FireSummary(self.runner_id)  # the INFO line a minute (runner/fire_summary.py)

    # -- control ---------------------------------------------------------------------------------

    def nudge(self, at: datetime | None = None) -> None:
        """Wake the loop early: a wake is due at ``at`` (now if ``None``).

        A hint later than the loop's planned wake-up is ignored: the loop gets there anyway.
        """
        planned = self._planned
        if at is None or planned is None or at < planned:
            self._wakeup.set()

    def stop(self) -> None:
        """Stop claiming and hand back unstarted claims at once; a sink already running is finished.

        The hand-back runs on the heartbeat thread (its own connection), so it happens even while the
        main thread is inside a sink that hangs.
        """
        self.stopping.set()
        self._wakeup.set()
        self._beat_now.set()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            if self.stopping.is_set():
                logger.warning("second signal %s: exiting at once; leases of wakes in hand will lapse", signum)
                os._exit(1)
            logger.info(SIGNAL_HINT, signum, len(self._in_hand))
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

    def run_once(self, *, claim_tries: int | None = None) -> RunReport:
        """Claim one batch and fire it here with the engine's pass loop; used by ``--once`` and the demo.

        Claims not started when a stop is requested (or whose lease is no longer known to be good)
        are handed back, uncharged. A settle the database refuses is tried until it succeeds.
        ``claim_tries``: see :meth:`_claim` (``--once`` has no next pass to claim in).
        """
        with running_as(self.runner_id):
            return self._run_once(claim_tries)

    def _run_once(self, claim_tries: int | None) -> RunReport:
        drop_broken_connections()
        limit = self.planned_batch()
        claims = self._claim(limit, tries=claim_tries)
        try:
            report = engine.fire_claims(
                claims,
                settle_window=self.settle_window,
                may_start=self.may_start,
                on_settled=self._settled,
                tries=None,
            )
        except BaseException:
            self._forget(claims)
            raise
        if len(claims) < limit:
            engine.observe_unwakeable()
        report.next_at = engine.next_due_at()
        return report

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        """Register, recover lapsed leases, then loop until stopped; always deregister on the way out.

        Every record this runner's threads log carries its id (:mod:`django_wakes.logs`).
        """
        with running_as(self.runner_id):
            self._run()

    def _run(self) -> None:
        notify.register_local(self)
        heartbeat = threading.Thread(
            target=self._in_runner(self._heartbeat_loop), name="django-wakes-heartbeat", daemon=True
        )
        listener = None
        alias = wakes_settings.push_database or engine.db_alias()
        if self.listen and Listener.supported(alias):
            listener = Listener(alias, self.nudge, runner_id=self.runner_id)
            listener.start()
        logger.info("%s", self.describe(push_alias=alias if listener is not None else None))
        self._heartbeat = heartbeat
        if self.concurrency > 1:
            self._async = AsyncFirer(self)
            self._async.start()
            self._workers = [self._start_worker(n) for n in range(self.concurrency)]
        try:
            self._register()
            heartbeat.start()
            # Boot recovery is the first pass: claim_batch takes over lapsed leases before anything
            # else, and through _claim they are in hand, with this runner's lease and heartbeat.
            while not self.stopping.is_set():
                self._check_threads()
                try:
                    self._maybe_gc()
                    next_at, busy = self._pass()
                except TRANSIENT_ERRORS as exc:
                    drop_broken_connections()
                    self._wakeup.wait(self._passes.failed(exc))
                    self._wakeup.clear()
                    continue
                except Exception:  # a bug or a broken hook: logged, and the next pass tries again
                    logger.exception("runner %s: a pass failed; trying again in %.1fs", self.runner_id, self.interval)
                    drop_broken_connections()
                    self._wakeup.wait(self.interval)
                    self._wakeup.clear()
                    continue
                self._passes.succeeded()
                self._summary.flush()
                if self._when_reachable:
                    self._run_when_reachable()
                if self.stopping.is_set():
                    break
                if busy:
                    continue
                self._sleep_until(next_at)
            self._drain()
        except RunnerBroken:
            self.stop()  # finish what is in hand, give back the rest, then exit non-zero
            self.hand_back_unstarted()
            self._drain()
            raise
        finally:
            notify.unregister_local(self)
            if listener is not None:
                listener.stop()
            self.stopping.set()
            self._finished.set()
            self._wakeup.set()
            self._beat_now.set()
            for _ in self._workers:
                self._queue.put(None)
            if self._async is not None:
                self._async.stop(0.0)
            self._deregister()
            self._summary.flush(force=True)
            connections.close_all()

    def describe(self, *, push_alias: str | None) -> str:
        """The start-up line: who this runner is and what it fires, how it learns of due wakes, its lease."""
        kinds = registry.kinds()
        seconds = f"{self.lease.total_seconds():g}s"
        return (
            f"runner {self.runner_id} starting: kinds={','.join(kinds) or '(none)'}"
            f" queues={','.join(self.queues) if self.queues else 'all'}"
            f" lanes={','.join(self.lanes) if self.lanes else 'all'}"
            f" push={f'LISTEN({push_alias})' if push_alias is not None else 'off'} poll={self.interval:g}s"
            f" lease={seconds} concurrency={self.concurrency} batch={self.batch}"
        )

    def _run_when_reachable(self) -> None:
        """Call the boot jobs that missed the database again (a pass just reached it); keep those not done."""
        pending = []
        for job in self._when_reachable:
            try:
                done = job()
            except Exception:  # a bug in the job: logged once, not retried every pass
                logger.exception("runner %s: %s failed", self.runner_id, getattr(job, "__name__", job))
                done = True
            if not done:
                pending.append(job)
        self._when_reachable = pending

    def _pass(self) -> tuple[datetime | None, bool]:
        """Run one pass; return the next known due time and whether to go again at once."""
        self._planned = None
        self._wakeup.clear()
        if not self._workers:
            limit = self.planned_batch()
            report = self.run_once()
            return report.next_at, report.claimed >= limit
        drop_broken_connections()
        self._start_waiting()
        # Hold the slots' worth of wakes plus the claim-ahead; refill once half the claim-ahead is used
        # (so claims come in batches), or when a slot is idle.
        ahead = self.claim_ahead()
        in_flight = self.in_flight()
        if in_flight >= self.concurrency + ahead // 2 and in_flight >= self.concurrency:
            self._wakeup.wait(self.interval)  # every slot is busy; one finishing sets _wakeup
            return None, True
        limit = min(self.planned_batch(), self.concurrency + ahead - in_flight)
        claims = self._claim(limit)
        for n, claim in enumerate(claims):
            sink_fn = registry.get(claim.wake.kind)
            try:
                if self._async is not None and sink_fn is not None and inspect.iscoroutinefunction(sink_fn):
                    self._waiting.append(claim)
                else:
                    self._queue.put(claim)
            except BaseException:
                self._forget(claims[n:])  # not dispatched: handed back, or left to lapse uncharged
                raise
        self._start_waiting()
        if len(claims) < limit:
            engine.observe_unwakeable()
        if claims:
            return None, True
        return engine.next_due_at(), False

    def _sleep_until(self, next_at: datetime | None) -> None:
        seconds = self.interval
        if next_at is not None:
            seconds = min(max((next_at - clock.now()).total_seconds(), 0.0), self.interval)
            if seconds == 0.0:
                # Due but not claimable by us now (lane busy, leases held): back off briefly.
                seconds = min(self.interval, 0.05)
        self._planned = clock.now() + timedelta(seconds=seconds)
        self._wakeup.wait(seconds)

    def _maybe_gc(self) -> None:
        gc_after = wakes_settings.gc_after
        if self.gc_every is None or gc_after is None or time.monotonic() < self._next_gc:
            return
        self._next_gc = time.monotonic() + self.gc_every.total_seconds()
        deleted = engine.gc(older_than=gc_after)
        if deleted:
            logger.info("gc deleted %d terminal wake(s) older than %s", deleted, gc_after)
