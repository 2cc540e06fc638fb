"""A runner's periodic summary: one INFO line a minute instead of one per fired wake.

The per-wake ``fired wake=…`` line is DEBUG (``runwakes -v 2``); at the default verbosity a busy
runner would otherwise write a line per wake (hundreds of thousands an hour). This line says what an
operator reads the log for: how much fired, failed and was retried, and how late the sinks started
(the claim's time against the wake's due time, p50 and p99), over the last :data:`SUMMARY_SECONDS`.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from ..engine import Claim, FireOutcome
from ..states import Disposition

logger = logging.getLogger("django_wakes")

#: How often (seconds) a busy runner logs its summary; an idle one logs nothing.
SUMMARY_SECONDS = 60.0
#: The lateness samples one summary keeps (uniformly sampled beyond that): enough for a stable p99.
SAMPLES = 20_000

#: The outcomes whose sink ran (or was due to): their lateness counts.
_ATTEMPTED = frozenset(
    {
        Disposition.FIRED,
        Disposition.EXPIRED,
        Disposition.STOPPED,
        Disposition.FAILED,
        Disposition.RETRY,
        Disposition.DEAD,
        Disposition.DEFERRED,
        Disposition.OUTAGE,
    }
)
#: What each outcome counts towards: ``failed`` is every failed attempt, ``dead`` those that were the last.
_COUNTED: dict[str, tuple[str, ...]] = {
    Disposition.FIRED: ("fired",),
    Disposition.STOPPED: ("fired",),
    Disposition.EXPIRED: ("expired",),
    Disposition.FAILED: ("failed",),
    Disposition.DEAD: ("failed", "dead"),
    Disposition.RETRY: ("retried",),
    Disposition.OUTAGE: ("retried",),
    Disposition.DEFERRED: ("deferred",),
}
_ORDER = ("fired", "failed", "retried", "dead", "expired", "deferred", "other")


def percentile(ordered: list[int], fraction: float) -> int:
    """The ``fraction`` quantile of an ascending list (nearest rank); 0 for an empty one."""
    if not ordered:
        return 0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class FireSummary:
    """The counts and lateness of one summary window; :meth:`add` per settled claim, :meth:`flush` to log."""

    def __init__(self, runner_id: str, *, every: float = SUMMARY_SECONDS) -> None:
        self.runner_id = runner_id
        self.every = every
        self._lock = threading.Lock()
        self._reset(time.monotonic())

    def _reset(self, now: float) -> None:
        self._since = now
        self._counts: dict[str, int] = dict.fromkeys(_ORDER, 0)
        self._late: list[int] = []
        self._seen = 0

    def add(self, claim: Claim, outcome: FireOutcome) -> None:
        """Count one settled claim (any thread)."""
        disposition = outcome.outcome
        with self._lock:
            for name in _COUNTED.get(disposition, ("other",)):
                self._counts[name] += 1
            if disposition not in _ATTEMPTED or claim.wake.due_at is None:
                return
            late = max(0, int((claim.started_at - claim.wake.due_at).total_seconds() * 1000))
            self._seen += 1
            if len(self._late) < SAMPLES:
                self._late.append(late)
            else:  # reservoir sampling: every lateness of the window equally likely to be kept
                slot = random.randrange(self._seen)  # noqa: S311 - statistics, not security
                if slot < SAMPLES:
                    self._late[slot] = late

    def flush(self, *, force: bool = False) -> str | None:
        """Log the window's line (INFO) once it is :attr:`every` seconds old, or now with ``force``; return it.

        Nothing is logged for a window in which nothing was settled.
        """
        now = time.monotonic()
        with self._lock:
            if not force and now - self._since < self.every:
                return None
            counts, late, since = self._counts, sorted(self._late), self._since
            self._reset(now)
        if not any(counts.values()):
            return None
        shown = " ".join(f"{name}={counts[name]}" for name in _ORDER if counts[name] or name in _ORDER[:3])
        line = (
            f"runner {self.runner_id}: last {now - since:.0f}s: {shown} "
            f"late_p50_ms={percentile(late, 0.5)} late_p99_ms={percentile(late, 0.99)}"
        )
        logger.info("%s", line, extra={"runner_id": self.runner_id})
        return line
