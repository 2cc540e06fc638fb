"""The runner's async firer: ``async def`` sinks awaited together on one loop, outcomes settled in batches."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from django.db import connections

from .. import engine, tracing
from ..engine import Claim
from ..engine.shared import drop_broken_connections, firing_wake
from ..logs import running_as

if TYPE_CHECKING:
    from .sweeper import Sweeper

logger = logging.getLogger("django_wakes")


class AsyncFirer:
    """Await ``async def`` sinks together on one event loop: I/O-bound sinks need no thread each.

    The pass's thread runs the checks before a sink (lease knowledge, stopped or busy session, the
    start guard) and hands the sink to :meth:`submit`; the loop's thread only awaits sinks; a settler
    thread with its own connection writes the outcomes down, successes in batches (one transaction
    per ``settle_window``), failures, retries and defers at once, and trying each until the database
    takes it (the sink has run). A sink's own ``await Model.objects.aget(...)`` runs through Django's
    ``sync_to_async`` as usual.

    The fire threads hand their plain successes to the same settler (:meth:`settle_later`), so a
    ``--concurrency`` runner commits one transaction per window, not one per wake. A slot counts
    as free as soon as its sink has finished: the runner claims the next wake while the settler
    writes the last one down (the claim stays in hand, its lease renewed, until it is settled).
    """

    def __init__(self, sweeper: Sweeper) -> None:
        self.sweeper = sweeper
        self.loop = asyncio.new_event_loop()
        self._done: queue.Queue[tuple[Claim, Any, BaseException | None] | engine.Succeeded | None] = queue.Queue()
        self._lock = threading.Lock()
        self._running = 0
        self._stopped = False
        self._loop_thread = threading.Thread(target=self._run_loop, name="django-wakes-async", daemon=True)
        self._settler = threading.Thread(target=self._settle_loop, name="django-wakes-async-settle", daemon=True)

    @property
    def running(self) -> int:
        with self._lock:
            return self._running

    @property
    def threads(self) -> tuple[threading.Thread, threading.Thread]:
        """The event loop's thread and the settler's: the runner exits if either ends while it runs."""
        return self._loop_thread, self._settler

    def start(self) -> None:
        self._loop_thread.start()
        self._settler.start()

    def submit(self, claim: Claim, sink_fn: Any) -> None:
        with self._lock:
            self._running += 1
        asyncio.run_coroutine_threadsafe(self._fire(claim, sink_fn), self.loop)

    def stop(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the sinks in flight, then stop the loop and the settler (once)."""
        if self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            time.sleep(0.01)
        self._done.put(None)
        self._settler.join(max(deadline - time.monotonic(), 0.1))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(1.0)
        if not self.loop.is_running():
            self.loop.close()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        with running_as(self.sweeper.runner_id):
            self.loop.run_forever()

    def settle_later(self, done: engine.Succeeded) -> None:
        """Settle a fire thread's plain success with the next batch."""
        self._done.put(done)

    async def _fire(self, claim: Claim, sink_fn: Any) -> None:
        running = firing_wake.set(claim.wake)
        try:
            with tracing.sink(claim):
                returned = await sink_fn(claim.wake, dict(claim.result))
        except BaseException as exc:  # noqa: BLE001 - settled as a failed attempt (CancelledError too)
            self._done.put((claim, None, exc))
        else:
            self._done.put((claim, returned, None))
        finally:
            firing_wake.reset(running)
            self.sweeper.sink_finished(claim)
            with self._lock:
                self._running -= 1  # the slot is free; the settler writes the outcome down
            self.sweeper._wakeup.set()

    def _settle_loop(self) -> None:
        with running_as(self.sweeper.runner_id):
            self._settle_batches()

    def _settle_batches(self) -> None:
        try:
            while True:
                first = self._done.get()
                if first is None:
                    return
                batch = [first]
                window_ends = time.monotonic() + self.sweeper.settle_window
                while (left := window_ends - time.monotonic()) > 0:
                    try:
                        item = self._done.get(timeout=left)
                    except queue.Empty:
                        break
                    if item is None:
                        self._done.put(None)  # finish this batch, then stop
                        break
                    batch.append(item)
                finished: set[int] = set()
                try:
                    self._settle(batch, finished)
                except BaseException:  # noqa: BLE001 - a bug or a host's hook: the leases lapse, another pass re-drives them
                    logger.exception("settling %d async sink outcome(s) failed", len(batch))
                    drop_broken_connections()
                    for item in batch:
                        claim = item.claim if isinstance(item, engine.Succeeded) else item[0]
                        if id(claim) not in finished:
                            self._finish(claim, None, finished)
        finally:
            connections.close_all()

    def _settle(
        self, batch: list[tuple[Claim, Any, BaseException | None] | engine.Succeeded], finished: set[int]
    ) -> None:
        successes: list[engine.Succeeded] = []
        for item in batch:
            if isinstance(item, engine.Succeeded):  # from a fire thread
                successes.append(item)
                continue
            claim, returned, exc = item
            if exc is not None:
                self._finish(claim, engine.sink_raised(claim, exc, tries=None), finished)
                continue
            ran = engine.sink_returned(claim, returned, tries=None)
            if isinstance(ran, engine.Succeeded):
                successes.append(ran)
            else:
                self._finish(claim, ran, finished)
        for done, outcome in zip(successes, engine.settle_successes(successes, tries=None), strict=True):
            self._finish(done.claim, outcome, finished)

    def _finish(self, claim: Claim, outcome: engine.FireOutcome | None, finished: set[int]) -> None:
        finished.add(id(claim))
        if outcome is not None:
            self.sweeper._settled(claim, outcome)
        else:
            self.sweeper._forget([claim])
