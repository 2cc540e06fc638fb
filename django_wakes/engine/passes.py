"""Passes: claim a batch, fire it, settle it — the one loop behind ``run_due``, ``recover`` and the runner.

:func:`fire_claims` is that loop. Sinks that return normally are settled together, one transaction
per ``settle_window`` seconds (and at the end of the batch): one commit for many wakes. Until then
they are still ``firing`` under their lease, so a crash before the flush re-drives them
(at-least-once). Failures, retries and defers are written down at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, Min

from .. import clock, tracing
from ..conf import wakes_settings
from ..durations import Duration, parse_duration
from ..logs import about
from ..models import Fence, State, Wake, WakeAttempt
from ..sinks import registry
from ..states import Disposition
from ..validation import key, positive_int
from . import interrupts, limit_slots, retention
from .claim import claim_batch
from .fencing import FireOutcome, release
from .leases import Claim
from .retention import forget_deliveries
from .settle import Succeeded, run_sink, settle_successes
from .shared import (
    ROLLBACK_TRIES,
    TRANSIENT_ERRORS,
    db_alias,
    default_runner_id,
    drop_broken_connections,
    earliest,
    logger,
)
from .takeover import take_over_lapsed

#: How long gc keeps accepted webhook delivery ids. A replay is refused by its timestamp after 10 minutes, but a
#: sender's own retries (a lost 200) come later, re-signed: Stripe's for three days, GitHub's redeliveries for three,
#: Svix's for over a day; and GitHub signs no timestamp, so its ids are all that refuses a replay.
WEBHOOK_IDS_KEPT = "30d"

#: How long sinks that returned normally wait to be settled together (seconds).
SETTLE_WINDOW = 0.05

#: Which counter of a :class:`RunReport` each disposition adds to (dead also counts as failed).
_TALLY: dict[Disposition, tuple[str, ...]] = {
    Disposition.FIRED: ("fired",),
    Disposition.STOPPED: ("fired",),
    Disposition.EXPIRED: ("expired",),
    Disposition.DEFERRED: ("deferred",),
    Disposition.FAILED: ("failed",),
    Disposition.RETRY: ("failed",),
    Disposition.DEAD: ("dead", "failed"),
    Disposition.FENCED: ("fenced",),
    Disposition.RELEASED: ("released",),
    Disposition.UNWAKEABLE: (),
    Disposition.SUPERSEDED: ("superseded",),
    Disposition.BUSY: ("deferred",),
    Disposition.OUTAGE: ("deferred",),  # tried again soon, not charged: a "later", not a failure
}


#: The counts :meth:`RunReport.summary` prints, in this order.
SUMMARY_COUNTS = ("claimed", "fired", "expired", "failed", "dead", "deferred", "released", "fenced", "superseded")


@dataclass
class RunReport:
    """What one pass (or a runner's whole life) did, and when the next pass is worth running."""

    fired: int = 0
    failed: int = 0
    expired: int = 0
    deferred: int = 0
    dead: int = 0
    fenced: int = 0
    released: int = 0
    superseded: int = 0
    claimed: int = 0
    next_at: datetime | None = None
    outcomes: dict[int, str] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for a log: every count as ``name=n``, and when the next wake is due."""
        counts = " ".join(f"{name}={getattr(self, name)}" for name in SUMMARY_COUNTS)
        return f"{counts} next_due={self.next_at.isoformat() if self.next_at is not None else '-'}"

    def add(self, wake_id: int, result: FireOutcome) -> None:
        self.outcomes[wake_id] = result.outcome
        for counter in _TALLY[result.outcome]:
            setattr(self, counter, getattr(self, counter) + 1)


def fire_claims(
    claims: list[Claim],
    *,
    settle_window: float = SETTLE_WINDOW,
    may_start: Callable[[Claim], bool] | None = None,
    on_settled: Callable[[Claim, FireOutcome], None] | None = None,
    tries: int | None = ROLLBACK_TRIES,
) -> RunReport:
    """Fire ``claims`` here, one after another, settling successes in batches; return the tally.

    ``may_start`` is asked right before each sink starts: when it says no (the runner is stopping,
    or no longer knows its lease to be good), the claim is handed back unstarted and uncharged — or,
    if even that fails, left to lapse, which charges nothing either (no sink started).
    ``on_settled`` hears of every claim as it is settled (the runner drops it from the leases it
    renews). ``tries``: see :func:`~django_wakes.engine.settle.run_sink`.
    """
    report = RunReport(claimed=len(claims))

    def settled(claim: Claim, outcome: FireOutcome) -> None:
        tracing.finished(claim, outcome.outcome)
        report.add(claim.wake.pk, outcome)
        if on_settled is not None:
            on_settled(claim, outcome)

    unsettled: list[Succeeded] = []
    window_ends = 0.0

    def flush() -> None:
        for done, outcome in zip(unsettled, settle_successes(unsettled, tries=tries), strict=True):
            settled(done.claim, outcome)
        unsettled.clear()

    # A sink's own sys.exit() is its failed attempt; a real Ctrl-C during the pass stops the pass.
    with interrupts.noting_signals():
        try:
            for claim in claims:
                if may_start is not None and not may_start(claim):
                    hand_back(claim)
                    settled(claim, FireOutcome(Disposition.RELEASED, settled=True))
                    continue
                ran = run_sink(claim, tries=tries)
                if isinstance(ran, Succeeded):
                    if not unsettled:
                        window_ends = time.monotonic() + settle_window
                    unsettled.append(ran)
                else:
                    settled(claim, ran)
                if unsettled and time.monotonic() >= window_ends:
                    flush()
        finally:
            flush()  # a later claim's error must not drop the outcomes of sinks that already ran
    return report


def hand_back(claim: Claim) -> None:
    """Release an unstarted claim; if the database cannot be reached, let its lease lapse (uncharged)."""
    try:
        release(claim)
    except TRANSIENT_ERRORS as exc:
        logger.info(
            "could not hand back wake %s (%s); its lease will lapse, uncharged",
            claim.wake.pk,
            exc,
            extra=about(claim.wake, claim.runner_id),
        )
        drop_broken_connections()


class _UnwakeableLog:
    """Warn once per kind whose due wakes no sink here can fire; silent while it stays so, again if it returns.

    A runner loads its sinks when it starts: one deployed after it started (a new ``wakes.py``, a ``SINKS``
    entry, a ``TASKS`` backend) is fired only once the runner restarts, so the warning says so.
    """

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def observe(self, rows: list[tuple[int, str]]) -> None:
        current: dict[str, int] = {}
        for wake_id, kind in rows:
            current.setdefault(kind, wake_id)
        for kind, wake_id in current.items():
            if kind not in self._warned:
                logger.warning(
                    "kind=%r has no sink in this runner: wake %s and any other due wake of it stay due; "
                    "a sink deployed after the runner started is loaded when the runner restarts",
                    kind,
                    wake_id,
                    extra={"wake_id": wake_id, "kind": kind, "lane": None, "workspace_id": None},
                )
        self._warned = set(current)

    def reset(self) -> None:
        self._warned = set()


unwakeable_log = _UnwakeableLog()


def observe_unwakeable(kinds: list[str] | None = None) -> None:
    """Warn once per kind about due wakes no registered sink can fire; they stay due, untouched."""
    kinds = registry.kinds() if kinds is None else kinds
    rows = Wake.objects.using(db_alias()).unwakeable(clock.now(), kinds).values_list("id", "kind")[:100]
    unwakeable_log.observe(list(rows))


def next_due_at(kinds: list[str] | None = None) -> datetime | None:
    """Return the earliest moment a pending wake of a fireable kind, or a lease, comes due."""
    kinds = registry.kinds() if kinds is None else kinds
    manager = Wake.objects.db_manager(db_alias())
    due = manager.pending().of_kinds(kinds).aggregate(m=Min("due_at"))["m"]
    lease = manager.filter(state=State.FIRING).of_kinds(kinds).aggregate(m=Min("lease_until"))["m"]
    return earliest(due, lease)


def run_due(
    *,
    limit: int | None = None,
    runner_id: str | None = None,
    lanes: list[str] | None = None,
    queues: list[str] | None = None,
) -> RunReport:
    """Run one pass here: claim a batch, fire each wake, settle; one failure never stops the rest."""
    limit = positive_int(limit, name="limit") if limit is not None else wakes_settings.batch
    runner_id = key(runner_id, name="runner_id") if runner_id is not None else default_runner_id()
    lanes = [key(lane, name="lanes") for lane in lanes] if lanes is not None else None
    queues = [key(queue, name="queues") for queue in queues] if queues is not None else None
    claims = claim_batch(runner_id=runner_id, limit=limit, lanes=lanes, queues=queues)
    report = fire_claims(claims)
    kinds = registry.kinds()
    if len(claims) < limit:
        observe_unwakeable(kinds)
    report.next_at = next_due_at(kinds)
    return report


def recover(*, runner_id: str | None = None, lease: timedelta | None = None, queues: list[str] | None = None) -> int:
    """Re-drive every wake whose lease lapsed (boot-time recovery); return how many were re-driven."""
    runner_id = runner_id or default_runner_id()
    total = 0
    while True:
        claims = take_over_lapsed(runner_id=runner_id, limit=wakes_settings.batch, lease=lease, queues=queues)
        fire_claims(claims)
        total += len(claims)
        if len(claims) < wakes_settings.batch:
            return total


def gc(*, older_than: Duration = "30d", batch: int = 1000) -> int:
    """Delete terminal wakes (and their attempts) not updated for ``older_than``; return how many.

    Deletes in bounded batches so a large backlog never holds one long transaction. Note that a
    deleted wake no longer answers to its idempotency key.
    """
    cutoff = clock.now() - parse_duration(older_than, name="older_than")
    using = db_alias()
    total = 0
    retention.forget_expired(using, clock.now())
    forget_deliveries(WEBHOOK_IDS_KEPT)
    limit_slots.forget_idle(using, cutoff, clock.now())
    newest_fence = Fence.objects.using(using).aggregate(m=Max("pk"))["m"]
    if newest_fence is not None:  # only the newest token matters: the sequence continues after it
        Fence.objects.using(using).filter(pk__lt=newest_fence).delete()
    while True:
        ids = list(Wake.objects.using(using).terminal_before(cutoff).values_list("pk", flat=True)[:batch])
        if not ids:
            return total
        with transaction.atomic(using=using):
            WakeAttempt.objects.using(using).filter(wake_id__in=ids).delete()
            total += Wake.objects.using(using).filter(pk__in=ids).delete()[1].get(Wake._meta.label, 0)
