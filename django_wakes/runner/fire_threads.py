"""``--concurrency``: the fire threads, the async sinks' slots, and what happens when a thread dies.

Claimed wakes wait in a queue for the fire threads (each keeps its own database connection for its
whole life); ``async def`` sinks are awaited together on one event loop (:mod:`.async_firer`). A
fire thread that dies is replaced and its claim given back; a thread that cannot be replaced
(heartbeat, async loop, settler) ends the runner (:class:`RunnerBroken`).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connections

from .. import engine
from ..engine import Claim
from ..engine.shared import drop_broken_connections
from ..logs import about, running_as
from .async_firer import AsyncFirer
from .in_hand import InHand

logger = logging.getLogger("django_wakes")


class RunnerBroken(RuntimeError):
    """A thread the runner cannot do without ended: ``runwakes`` exits non-zero for its supervisor to restart it."""


class FireThreads(InHand):
    """The fire threads of a ``--concurrency`` runner (a part of :class:`~.sweeper.Sweeper`)."""

    settle_window: float
    shutdown_timeout: float
    _wakeup: threading.Event
    _queue: queue.Queue[Claim | None]
    _workers: list[threading.Thread]
    _holding: dict[threading.Thread, Claim]
    _heartbeat: threading.Thread | None
    _async: AsyncFirer | None
    _waiting: collections.deque[Claim]

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

    def _in_runner(self, target: Callable[[], None]) -> Callable[[], None]:
        """``target`` for a thread of this runner: its records carry the runner's id."""

        def run() -> None:
            with running_as(self.runner_id):
                target()

        return run

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
