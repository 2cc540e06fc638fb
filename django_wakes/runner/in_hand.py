"""What a runner knows about the claims in its hand: when each lease was last confirmed, whether its sink
started, whether it was lost; whether a sink may start; claiming, settling and giving claims back.

A runner starts a sink only while it *knows* its lease is good: each claim remembers when its lease
was last confirmed (claimed, or renewed by a heartbeat that saw the row still held under its token);
a claim whose confirmation is older than :data:`SAFE_LEASE_FRACTION` of the lease is handed back
unstarted instead of fired. The batch a runner claims is planned from its running average sink time.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from .. import engine, tracing
from ..engine import Claim, RunReport
from ..engine.shared import drop_broken_connections, retry_rolled_back
from ..logs import about
from ..states import Disposition
from .fire_summary import FireSummary
from .reconnect import Reconnect

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


class InHand(Reconnect):
    """The claims in hand and the runner's local knowledge of them (a part of :class:`~.sweeper.Sweeper`).

    One lock guards all of it, so a sink never starts for a claim that the heartbeat has just found
    lost or handed back. The attributes are set by :meth:`Sweeper.__init__ <.sweeper.Sweeper>`.
    """

    batch: int
    concurrency: int
    lease: timedelta
    lanes: list[str] | None
    queues: list[str] | None
    runner_id: str
    stopping: threading.Event
    totals: RunReport
    _in_hand: dict[int, Claim]
    _confirmed: dict[int, float]
    _started: dict[int, float]
    _lost: set[int]
    _timed: set[int]
    _in_hand_lock: threading.Lock
    _sink_seconds: float
    _summary: FireSummary

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
            self._summary.add(claim, outcome)
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

        def claim_pass() -> list[Claim]:
            return take() if tries is None else retry_rolled_back("claim pass", take, tries=tries)

        if self.may_take_over():
            claims = claim_pass()
        else:
            with engine.takeovers_held_back():
                claims = claim_pass()
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
