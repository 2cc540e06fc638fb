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

from .. import clock, engine, tracing
from ..conf import wakes_settings
from ..engine import TRANSIENT_ERRORS, Claim, RunReport, notify, runners
from ..engine.shared import drop_broken_connections, retry_rolled_back
from ..logs import about, running_as
from ..sinks import registry
from ..states import Disposition
from .async_firer import AsyncFirer
from .listener import Listener
from .outage import OutageLog

logger = logging.getLogger("django_wakes")

#: A claim's sink starts only while its lease was confirmed less than this fraction of the lease ago.
SAFE_LEASE_FRACTION = 0.5
#: How strongly the latest sink duration moves the running average the batch size is planned from.
DURATION_SMOOTHING = 0.2
#: ``--concurrency``: claim ahead, beyond the free slots, as many wakes as the slots finish in this
#: long (by the running average sink duration), so a freed slot starts its next wake at once instead
#: of after the next claim's round trip. Slow sinks get (next to) none: their wakes stay claimable
#: by other runners.
CLAIM_AHEAD_SECONDS = 0.1


class RunnerBroken(RuntimeError):
    """A thread the runner cannot do without ended: ``runwakes`` exits non-zero for its supervisor to restart it."""


class Sweeper:
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

    # -- what this runner knows about its claims --------------------------------------------------

    @property
    def safe_lease_seconds(self) -> float:
        return self.lease.total_seconds() * SAFE_LEASE_FRACTION

    def may_start(self, claim: Claim) -> bool:
        """Whether ``claim``'s sink may start now; if so, it counts as started from here on.

        No when stopping, when the heartbeat found the claim taken over, or when its lease was last
        confirmed longer ago than :data:`SAFE_LEASE_FRACTION` of the lease (this runner stalled or
        lost the database: another runner may already own the wake).
        """
        wake_id = claim.wake.pk
        now = time.monotonic()
        with self._in_hand_lock:
            if self.stopping.is_set() or wake_id in self._lost or wake_id not in self._in_hand:
                return False
            age = now - self._confirmed.get(wake_id, float("-inf"))
            if age >= self.safe_lease_seconds:
                self._lost.add(wake_id)
                stale = True
            else:
                self._started[wake_id] = now
                stale = False
        if stale:
            logger.warning(
                "not starting wake %s: its lease was last confirmed %.1fs ago (lease %.1fs); handing it back",
                wake_id,
                age,
                self.lease.total_seconds(),
                extra=about(claim.wake, self.runner_id),
            )
        return not stale

    def _settled(self, claim: Claim, outcome: engine.FireOutcome) -> None:
        """Drop a settled claim from the leases the heartbeat renews, and count it.

        Only if it is still the claim in hand for its wake: this runner may have re-claimed the wake
        (its own lease lapsed) and a newer claim's bookkeeping must survive the older one's settle.
        """
        tracing.finished(claim, outcome.outcome)
        wake_id = claim.wake.pk
        with self._in_hand_lock:
            started = None
            timed = False
            if self._in_hand.get(wake_id) is claim:
                self._in_hand.pop(wake_id, None)
                self._confirmed.pop(wake_id, None)
                self._lost.discard(wake_id)
                started = self._started.pop(wake_id, None)
                timed = wake_id in self._timed
                self._timed.discard(wake_id)
            self.totals.add(wake_id, outcome)
            self.totals.outcomes.clear()  # a runner's life is long: keep the counts, not every id
            if started is not None and not timed:
                took = time.monotonic() - started
                self._sink_seconds += DURATION_SMOOTHING * (took - self._sink_seconds)

    def give_back(self, claim: Claim, exc: BaseException) -> None:
        """Hand back at once a claim whose thread broke outside its sink (``exc``); stop renewing its lease.

        Unstarted, it is released (pending again, uncharged). Started, it is settled as a failed attempt
        with ``exc`` recorded (charged, retried with backoff: a wake that breaks its thread every time
        ends in the dead letter, not in a loop). If even that fails, its lease is left to lapse. No-op
        for a claim no longer in hand (already settled or given back).
        """
        wake_id = claim.wake.pk
        with self._in_hand_lock:
            if self._in_hand.get(wake_id) is not claim:
                return
            started = wake_id in self._started
        outcome = engine.FireOutcome(Disposition.RELEASED, settled=False)
        try:
            if started:
                outcome = engine.sink_raised(claim, exc)
            elif engine.release(claim):
                outcome = engine.FireOutcome(Disposition.RELEASED, settled=True)
        except BaseException:  # noqa: BLE001 - the database or a hook again: the lease lapses, the start guard decides
            logger.exception("could not give wake %s back; its lease will lapse", wake_id)
            drop_broken_connections()
        finally:
            self._settled(claim, outcome)

    def _forget(self, claims: list[Claim]) -> None:
        """Stop renewing ``claims`` (a pass broke off): unstarted ones are handed back, or lapse uncharged."""
        for claim in claims:
            with self._in_hand_lock:
                if self._in_hand.get(claim.wake.pk) is not claim:
                    continue
                unstarted = claim.wake.pk not in self._started
            if unstarted:
                engine.hand_back(claim)
            self._settled(claim, engine.FireOutcome(Disposition.RELEASED, settled=False))

    @property
    def fired(self) -> int:
        return self.totals.fired + self.totals.expired

    @property
    def failed(self) -> int:
        return self.totals.failed

    def planned_batch(self) -> int:
        """How many wakes to claim: no more than this runner can start within half a lease."""
        if self._sink_seconds <= 0:
            return self.batch
        can_start = int(self.safe_lease_seconds * self.concurrency / self._sink_seconds)
        return max(1, min(self.batch, can_start))

    def claim_ahead(self) -> int:
        """``--concurrency``: how many wakes to hold beyond the slots (see :data:`CLAIM_AHEAD_SECONDS`)."""
        if self._sink_seconds <= 0:
            return self.planned_batch()  # not known yet: as many as a plain runner claims
        return min(self.planned_batch(), int(self.concurrency * CLAIM_AHEAD_SECONDS / self._sink_seconds))

    def sink_finished(self, claim: Claim) -> None:
        """A sink of a ``--concurrency`` runner returned: its duration feeds the running average.

        Measured here rather than at the settle (as :meth:`_settled` does for a plain runner) because
        a concurrent runner settles successes in batches after the sink.
        """
        with self._in_hand_lock:
            started = self._started.get(claim.wake.pk)
            if started is None or self._in_hand.get(claim.wake.pk) is not claim:
                return
            self._timed.add(claim.wake.pk)
            took = time.monotonic() - started
            self._sink_seconds += DURATION_SMOOTHING * (took - self._sink_seconds)

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

    def _claim(self, limit: int, *, tries: int | None = None) -> list[Claim]:
        """Claim up to ``limit`` wakes (lapsed leases first); they are in hand, so the heartbeat renews them.

        A claim pass the database rolls back (a deadlock, SQLite's "database is locked") claims
        nothing, and the next pass tries again; with ``tries`` it is tried again here, up to that
        many times, and then its error is raised.
        """
        asked = time.monotonic()  # the lease runs from no earlier than this

        def take() -> list[Claim]:
            nonlocal asked
            asked = time.monotonic()
            return engine.claim_batch(
                runner_id=self.runner_id,
                limit=limit,
                lanes=self.lanes,
                lease=self.lease,
                queues=self.queues,
                raise_rolled_back=tries is not None,
            )

        claims = take() if tries is None else retry_rolled_back("claim pass", take, tries=tries)
        with self._in_hand_lock:
            for claim in claims:
                self._in_hand[claim.wake.pk] = claim  # replaces an older claim of the same wake, if any
                self._confirmed[claim.wake.pk] = asked
                self._started.pop(claim.wake.pk, None)
                self._lost.discard(claim.wake.pk)
        takeovers = sum(1 for claim in claims if claim.takeover)
        if takeovers:
            logger.info("re-driving %d wake(s) whose lease had lapsed", takeovers)
        return claims

    def _hand_back(self, claim: Claim) -> engine.FireOutcome:
        """Give back a claim :meth:`may_start` refused, and settle it here as released."""
        engine.hand_back(claim)
        released = engine.FireOutcome(Disposition.RELEASED, settled=True)
        self._settled(claim, released)
        return released

    def _fire(self, claim: Claim) -> None:
        """Fire one claim in a fire thread; a plain success goes to the settler, which batches them."""
        if not self.may_start(claim):
            self._hand_back(claim)
            return
        ran = engine.run_sink(claim, tries=None)
        self.sink_finished(claim)
        if isinstance(ran, engine.Succeeded) and self._async is not None:
            self._async.settle_later(ran)
            return
        if isinstance(ran, engine.Succeeded):
            ran = engine.settle_successes([ran], tries=None)[0]
        self._settled(claim, ran)

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        """Register, recover lapsed leases, then loop until stopped; always deregister on the way out.

        Every record this runner's threads log carries its id (:mod:`django_wakes.logs`).
        """
        with running_as(self.runner_id):
            self._run()

    def _in_runner(self, target: Callable[[], None]) -> Callable[[], None]:
        """``target`` for a thread of this runner: its records carry the runner's id."""

        def run() -> None:
            with running_as(self.runner_id):
                target()

        return run

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

    def in_flight(self) -> int:
        """Claims queued for or firing in the fire threads, async sinks being awaited, and claims waiting for them."""
        running = self._async.running if self._async is not None else 0
        return self._queue.unfinished_tasks + running + len(self._waiting)

    def _start_waiting(self) -> None:
        """Start claims waiting for an async slot, as many as there are free slots (in claim order)."""
        while self._waiting and self._async is not None and self._async.running < self.concurrency:
            claim = self._waiting.popleft()
            try:
                self._start_async(claim)
            except BaseException:
                self._forget([claim, *self._waiting])  # not started: handed back, or left to lapse uncharged
                self._waiting.clear()
                raise

    def _start_async(self, claim: Claim) -> None:
        """Start an async sink on the event loop (the checks before it run here, in the pass's thread)."""
        if not self.may_start(claim):
            self._hand_back(claim)
            return
        ready = engine.prepare_sink(claim, tries=None)
        if isinstance(ready, engine.FireOutcome):
            self._settled(claim, ready)
            return
        assert self._async is not None
        self._async.submit(claim, ready)

    def _start_worker(self, n: int) -> threading.Thread:
        worker = threading.Thread(target=self._in_runner(self._fire_worker), name=f"django-wakes-fire-{n}", daemon=True)
        worker.start()
        return worker

    def _fire_worker(self) -> None:
        """Fire claims from the queue until told to stop; unstarted claims are handed back on shutdown.

        Whatever a sink raises is settled by the engine as its failed attempt. Anything else that
        breaks a step (a bug, a host's hook or log handler) gives the claim back at once
        (:meth:`give_back`); a thread that dies all the same is replaced by :meth:`_check_threads`.
        """
        me = threading.current_thread()
        try:
            while True:
                claim = self._queue.get()
                try:
                    if claim is None:
                        return
                    self._holding[me] = claim
                    try:
                        self._fire(claim)
                    except BaseException as exc:  # noqa: BLE001 - not the sink's: keep the thread, give the claim back
                        logger.exception(
                            "firing wake %s broke outside its sink; giving the claim back",
                            claim.wake.pk,
                            extra=about(claim.wake, self.runner_id),
                        )
                        drop_broken_connections()
                        self.give_back(claim, exc)
                    self._holding.pop(me, None)
                finally:
                    self._queue.task_done()
                    self._wakeup.set()
        finally:
            connections.close_all()

    def _check_threads(self) -> None:
        """Replace a fire thread that ended while the runner runs, giving back what it held; raise
        :class:`RunnerBroken` if a thread that cannot be replaced (heartbeat, async loop, settler) ended.

        A runner must never renew a lease for work no thread is doing: a dead fire thread's claim is
        handed back at once, and without a heartbeat or a settler the runner exits for its supervisor
        to restart it.
        """
        if self.stopping.is_set():
            return
        for n, worker in enumerate(self._workers):
            if worker.is_alive():
                continue
            held = self._holding.pop(worker, None)
            logger.error(
                "fire thread %s ended unexpectedly%s; starting another",
                worker.name,
                f" holding wake {held.wake.pk}" if held is not None else "",
            )
            if held is not None:
                self.give_back(held, RuntimeError(f"the runner's fire thread {worker.name} ended while firing it"))
            self._workers[n] = self._start_worker(n)
        vital = [self._heartbeat, *(self._async.threads if self._async is not None else ())]
        for thread in vital:
            if thread is not None and thread.ident is not None and not thread.is_alive():
                raise RunnerBroken(f"runner {self.runner_id}: its {thread.name} thread ended; exiting")

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
        """Wait (at most ``shutdown_timeout``) for the fire threads and async sinks to finish."""
        if not self._workers:
            return
        waiting = list(self._waiting)  # claimed ahead, never started: handed back
        self._waiting.clear()
        self._forget(waiting)
        logger.info("waiting for %d wake(s) in hand", self.in_flight())
        for _ in self._workers:
            self._queue.put(None)
        deadline = time.monotonic() + self.shutdown_timeout
        for worker in self._workers:
            worker.join(max(deadline - time.monotonic(), 0.0))
        if self._async is not None:
            self._async.stop(max(deadline - time.monotonic(), 0.0))

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
        outage = OutageLog(f"runner {self.runner_id} registration")
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
