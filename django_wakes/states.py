"""The one state vocabulary: what the models store and what the querysets and the engine test for.

The models, the querysets and the engine all import these; nothing retypes a state name as a string.
"""

from __future__ import annotations

from enum import StrEnum

from django.db import models
from django.utils.translation import gettext_lazy as _


class TriggerType(models.TextChoices):
    """WHEN a wake fires."""

    AT = "at", _("at a time")
    """At ``fire_at`` (a one-shot time, or an occurrence of a cron/interval chain)."""
    ON_EVENT = "on_event", _("on an event")
    """When :func:`deliver_event` delivers its ``event_key``."""
    ON_APPROVAL = "on_approval", _("on an approval")
    """When a human answers through :func:`resolve` with its one-time token."""


class State(models.TextChoices):
    """Where a wake is in its life. Only ``pending`` and ``firing`` are live."""

    PENDING = "pending", _("pending")
    """Waiting for its time, its event or its answer (or for its lane, once triggered)."""
    FIRING = "firing", _("firing")
    """Claimed by a runner that holds a lease; re-driven by any runner once the lease lapses."""
    FIRED = "fired", _("fired")
    """Its sink ran to completion."""
    EXPIRED = "expired", _("expired")
    """Its trigger did not come before ``expires_at``; its sink was told so once."""
    CANCELLED = "cancelled", _("cancelled")
    """Cancelled while pending; it never fired."""
    DEAD = "dead", _("dead")
    """The dead letter: it failed ``max_attempts`` times; ``last_error`` says why."""
    SUPERSEDED = "superseded", _("superseded")
    """Its session was stopped (``stop_session``) before it fired; ``last_error`` holds the reason."""


LIVE_STATES = (State.PENDING, State.FIRING)
TERMINAL_STATES = (State.FIRED, State.EXPIRED, State.CANCELLED, State.DEAD, State.SUPERSEDED)


class CatchUp(models.TextChoices):
    """What a recurring chain does with occurrences missed while no runner was up."""

    REPLAY = "replay", _("replay every missed occurrence")
    """Fire each missed occurrence in order, one at a time, then return to the grid."""
    LATEST = "latest", _("fire the latest missed occurrence once")
    """Fire once for the newest missed slot, reporting how many were skipped, then resume."""
    SKIP = "skip", _("skip missed occurrences")
    """Fire none of the missed slots; resume at the next future one."""


class DstAmbiguous(models.TextChoices):
    """What a cron chain does with a wall time that fall-back repeats (``01:30`` twice)."""

    AUTO = "auto", _("first instance; both when the hour field covers every hour")
    """The default rule: once, at the first instance; at both when the hour field is ``*``/``0-23``."""
    FIRST = "first", _("first instance only")
    """Once, at the first instance (summer time)."""
    SECOND = "second", _("second instance only")
    """Once, at the second instance (standard time)."""
    BOTH = "both", _("both instances")
    """Twice: at each instance of the repeated wall time."""


class DstMissing(models.TextChoices):
    """What a cron chain does with a wall time that spring-forward skips (``02:30`` that never comes)."""

    SHIFT = "shift", _("at the moment of the change")
    """The default rule: at the first valid instant after the gap (the transition itself)."""
    SKIP = "skip", _("skipped")
    """Not at all that day: the occurrence after it is the next wall time that exists."""


class Outcome(models.TextChoices):
    """How one firing attempt ended."""

    FIRED = "fired", _("fired")
    """The sink returned normally."""
    EXPIRED = "expired", _("expired")
    """The sink was given the expiry notice and returned normally."""
    FAILED = "failed", _("failed")
    """The sink raised; the wake was rescheduled with backoff, or went dead."""
    RETRY = "retry", _("retry requested")
    """The sink returned ``Retry``."""
    DEFERRED = "deferred", _("deferred")
    """The sink returned ``Defer``: not counted as an attempt."""
    STOPPED = "stopped", _("stopped its chain")
    """The sink returned ``Stop``: fired, and its recurring chain ends."""
    INTERRUPTED = "interrupted", _("interrupted")
    """Its sink started, then the runner lost its lease (crash, kill, stall); another took over. Charged."""
    ABANDONED = "abandoned", _("abandoned (not charged)")
    """The runner lost its lease before its sink was known to start; another took over. Not charged."""
    OUTAGE = "outage", _("database outage (not charged)")
    """The sink raised because a database went away (connection lost or refused, server shutting down or
    read-only): retried soon, not charged. See :func:`~django_wakes.transient.is_outage`."""


class LimitScope(models.TextChoices):
    """Whose limit a slot belongs to (:class:`~django_wakes.models.LimitSlot`)."""

    KEY = "key", _("limit key")
    """A ``limit_key`` under ``WAKES["LIMITS"]``: each key that an entry matches has its own slots."""
    WORKSPACE = "workspace", _("workspace")
    """A workspace under ``WAKES["WORKSPACE_LIMIT"]``: each workspace has its own slots."""


class LimitKind(models.TextChoices):
    """What a limit counts."""

    CONCURRENCY = "concurrency", _("concurrency")
    """Wakes firing at once: a slot is held from the claim until the wake leaves ``firing``."""
    RATE = "rate", _("rate")
    """Wakes started per period: a slot is used by one start, then rests for the period."""


class Disposition(StrEnum):
    """What one fire did to its wake, as a pass tallies it: the attempt outcomes and four more.

    Not stored: an attempt row records an :class:`Outcome`; these are what a runner counts.
    """

    FIRED = Outcome.FIRED.value
    EXPIRED = Outcome.EXPIRED.value
    STOPPED = Outcome.STOPPED.value
    FAILED = Outcome.FAILED.value
    RETRY = Outcome.RETRY.value
    DEFERRED = Outcome.DEFERRED.value
    OUTAGE = Outcome.OUTAGE.value
    DEAD = "dead"
    """The sink failed its last attempt: the wake is in the dead letter."""
    FENCED = "fenced"
    """Another runner took the lease over meanwhile: this runner's outcome was discarded."""
    RELEASED = "released"
    """Handed back unstarted (shutdown, a lease no longer known to be good): no attempt charged."""
    UNWAKEABLE = "unwakeable"
    """No sink was registered for its kind any more: handed back untouched."""
    SUPERSEDED = "superseded"
    """Its session was stopped: settled as superseded without its sink running."""
    BUSY = "busy"
    """Its session was busy (``WAKES['SESSION_BUSY']``): deferred without an attempt."""

    @property
    def succeeded(self) -> bool:
        return self in (Disposition.FIRED, Disposition.EXPIRED, Disposition.STOPPED)

    @property
    def failed(self) -> bool:
        return self in (Disposition.FAILED, Disposition.RETRY, Disposition.DEAD)
