"""The durable rows: :class:`Wake`, its :class:`WakeAttempt` history, :class:`Receipt` and :class:`Runner`."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from . import states
from .approval_links import RetiredApprovalToken as RetiredApprovalToken  # its own module: models.py is full
from .deliveries import WebhookDelivery as WebhookDelivery  # the same
from .fields import KEY_LENGTH, InstantField
from .indexes import PENDING_BY_WORKSPACE
from .querysets import RunnerQuerySet, WakeQuerySet, live_since
from .states import LIVE_STATES, TERMINAL_STATES, CatchUp, DstAmbiguous, DstMissing, Outcome, State, TriggerType

__all__ = [
    "DEFAULT_QUEUE",
    "KEY_LENGTH",
    "LimitSlot",
    "QUEUE_NAME_LENGTH",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "CatchUp",
    "EventKeyLock",
    "Fence",
    "Outcome",
    "PausedLane",
    "Receipt",
    "RetainedEvent",
    "ReceiptState",
    "Runner",
    "SessionControl",
    "State",
    "TriggerType",
    "Wake",
    "WakeAttempt",
    "WatchedKey",
    "WorkspaceLock",
]

#: The queue a wake is in unless it names one (Django's Tasks framework calls its default queue the same).
DEFAULT_QUEUE = "default"
QUEUE_NAME_LENGTH = 100


class Wake(models.Model):
    """One durable "run this later, when X happens"."""

    id = models.BigAutoField(primary_key=True)
    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH)
    session_id = models.CharField(_("session"), max_length=KEY_LENGTH, null=True, blank=True)
    trigger_type = models.CharField(
        _("trigger"), max_length=max(len(v) for v in TriggerType.values), choices=TriggerType.choices
    )
    kind = models.CharField(_("kind"), max_length=100, default="session_turn")
    serial_key = models.CharField(_("lane"), max_length=KEY_LENGTH, null=True, blank=True)
    lane_lock = models.CharField(
        _("lane held"),
        max_length=KEY_LENGTH,
        null=True,
        blank=True,
        unique=True,
        help_text=_("Equals serial_key while this wake is firing: the unique index keeps a lane single-file."),
    )
    intent = models.JSONField(_("intent"), null=True, blank=True)
    result = models.JSONField(
        _("result"), null=True, blank=True, help_text=_("What the trigger delivered, saved before firing.")
    )
    state = models.CharField(
        _("state"), max_length=max(len(v) for v in State.values), choices=State.choices, default=State.PENDING
    )
    fire_at = InstantField(
        _("fire at"), null=True, blank=True, help_text=_("Scheduled time, or when the event/answer arrived.")
    )
    due_at = InstantField(
        _("due at"), null=True, blank=True, help_text=_("When a runner should next look at this wake.")
    )
    expires_at = InstantField(_("expires at"), null=True, blank=True)
    event_key = models.CharField(_("event key"), max_length=KEY_LENGTH, null=True, blank=True)
    event_match = models.JSONField(
        _("event match"),
        null=True,
        blank=True,
        help_text=_('Equality on paths of the delivered event, e.g. {"payload.branch": "main"}; all must hold.'),
    )
    prompt = models.TextField(_("approval prompt"), blank=True, default="")
    on_expiry = models.JSONField(
        _("answer on expiry"),
        null=True,
        blank=True,
        help_text=_("The answer an unanswered approval delivers when it expires (marked as defaulted)."),
    )
    token_hash = models.CharField(_("token hash"), max_length=64, null=True, blank=True, unique=True, editable=False)
    lease_until = InstantField(_("lease until"), null=True, blank=True)
    claim_token = models.CharField(_("claim token"), max_length=32, null=True, blank=True, editable=False)
    claimed_by = models.CharField(_("claimed by"), max_length=KEY_LENGTH, blank=True, default="")
    fence = models.BigIntegerField(
        _("fencing token"),
        default=0,
        help_text=_(
            "Grows with every claim of this wake and of its lane: hand it to an external system so it can "
            "refuse a writer holding an older one (a runner that stalled past its lease)."
        ),
    )
    guarded = models.BooleanField(
        _("start recorded"),
        default=False,
        help_text=_(
            "Set once a runner died holding this wake: from then on each claim records when its sink starts, "
            "so only an attempt whose sink really started is charged when a runner dies again."
        ),
    )
    sink_started_at = InstantField(_("sink started"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    max_attempts = models.PositiveIntegerField(_("max attempts"), default=5)
    last_error = models.TextField(_("last error"), blank=True, default="")
    idempotency_key = models.CharField(_("idempotency key"), max_length=KEY_LENGTH, null=True, blank=True)
    coalesce_key = models.CharField(
        _("coalesce slot"),
        max_length=KEY_LENGTH + 101,
        null=True,
        blank=True,
        unique=True,
        editable=False,
        help_text=_("kind|serial_key while a coalescing wake is pending: one per lane and kind."),
    )
    # Recurrence: a chain is the sequence of occurrences, each its own row.
    cron = models.CharField(_("cron"), max_length=120, blank=True, default="")
    every = models.DurationField(_("every"), null=True, blank=True)
    tz = models.CharField(_("time zone"), max_length=64, blank=True, default="")
    catch_up = models.CharField(
        _("catch-up"),
        max_length=max(len(v) for v in CatchUp.values),
        choices=CatchUp.choices,
        blank=True,
        default="",
    )
    dst_ambiguous = models.CharField(
        _("repeated hour"),
        max_length=max(len(v) for v in DstAmbiguous.values),
        choices=DstAmbiguous.choices,
        blank=True,
        default="",
        help_text=_("When fall-back repeats a cron time: first, second, both, or auto (blank: auto)."),
    )
    dst_missing = models.CharField(
        _("skipped hour"),
        max_length=max(len(v) for v in DstMissing.values),
        choices=DstMissing.choices,
        blank=True,
        default="",
        help_text=_("When spring-forward skips a cron time: shift to the change, or skip (blank: shift)."),
    )
    start_at = InstantField(_("chain starts"), null=True, blank=True)
    end_at = InstantField(_("chain ends"), null=True, blank=True)
    paused_at = InstantField(
        _("chain paused"),
        null=True,
        blank=True,
        help_text=_("Set while an operator holds this occurrence's chain: a pending one has due_at cleared."),
    )
    paused_due_at = InstantField(
        _("due when resumed"),
        null=True,
        blank=True,
        help_text=_("The due_at a paused pending occurrence gets back when its chain is resumed."),
    )
    chain_id = models.CharField(_("chain"), max_length=32, null=True, blank=True)
    occurrence = models.PositiveIntegerField(_("occurrence"), default=0)
    depth = models.PositiveIntegerField(
        _("depth"), default=0, help_text=_("How many sinks deep: a wake created while another fires is one deeper.")
    )
    trace_context = models.JSONField(
        _("trace context"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The OpenTelemetry context of the span that created it (a W3C traceparent carrier): every "
            "attempt's fire span continues that trace. Empty without the [otel] extra and a tracer provider."
        ),
    )
    scratch = models.JSONField(
        _("scratch"),
        null=True,
        blank=True,
        help_text=_("The sink's own notes across attempts, written in the same fenced settle as the attempt."),
    )
    output = models.JSONField(
        _("output"),
        null=True,
        blank=True,
        help_text=_("What the sink handed back with Done(output=...) or Stop(output=...), saved when it settled."),
    )
    priority = models.SmallIntegerField(
        _("priority"),
        default=0,
        help_text=_("Among due wakes, a higher priority is claimed first; a lane still fires in its own order."),
    )
    queue_name = models.CharField(
        _("queue"),
        max_length=QUEUE_NAME_LENGTH,
        default=DEFAULT_QUEUE,
        help_text=_("A runner started with --queues fires only wakes of those queues."),
    )
    limit_key = models.CharField(
        _("limit key"),
        max_length=KEY_LENGTH,
        null=True,
        blank=True,
        help_text=_('Its start waits for the limits WAKES["LIMITS"] sets on this key.'),
    )

    created_at = InstantField(_("created"))
    updated_at = InstantField(_("updated"))
    claimed_at = InstantField(_("claimed"), null=True, blank=True)
    settled_at = InstantField(_("settled"), null=True, blank=True)

    objects = WakeQuerySet.as_manager()

    class Meta:
        verbose_name = _("wake")
        verbose_name_plural = _("wakes")
        # Distinct from "change": wakes are never edited, but an operator may run engine transitions.
        permissions = [("operate_wake", _("Can cancel, retry and fire wakes (operator actions)"))]
        # The claim path's indexes are partial: each holds only the rows of the one state its query
        # asks for, so a table that is mostly terminal rows (gc keeps 30 days) gives the planner
        # nothing else to pick, whatever its statistics say (docs/performance.md, "stale statistics").
        # No index leads with ``state``: one would be chosen for ``state = 'pending'`` when the
        # statistics say no row is pending, and scanned in full for every lane probe. MySQL/MariaDB
        # have no partial indexes (Django creates these without their condition there); migrations
        # 0017 and 0018 add the state-leading ones their claim path used before.
        indexes = [
            # claim_batch(), next_due_at(): pending rows whose due_at has come, earliest first.
            models.Index(fields=["due_at", "id"], condition=Q(state=State.PENDING), name="wake_pending_due_idx"),
            # claim_batch() over a due backlog: pending rows in claim order (querysets.CLAIM_ORDER), so the
            # scan stops after the first free lane heads instead of sorting every due row. "priority IS
            # NOT NULL" (always true) is in its predicate so that only the claim's scan, which says so,
            # can use it: a lane probe walking it in full would cost O(pending) per candidate.
            models.Index(
                fields=["-priority", "due_at", "id"],
                condition=Q(state=State.PENDING, priority__isnull=False),
                name="wake_pending_order_idx",
            ),
            # the lane head check: the earliest pending (due_at, id) of a serial_key. Only rows in a lane,
            # so the claim's scan of due wakes (no serial_key condition) can never pick it.
            models.Index(
                fields=["serial_key", "due_at", "id"],
                condition=Q(state=State.PENDING, serial_key__isnull=False),
                name="wake_pending_lane_idx",
            ),
            PENDING_BY_WORKSPACE,  # engine.fairness (django_wakes/indexes.py)
            # recover(), renew_leases(): firing rows and their leases.
            models.Index(fields=["lease_until"], condition=Q(state=State.FIRING), name="wake_firing_lease_idx"),
            # deliver_event(): pending watchers of one key in one workspace.
            models.Index(fields=["workspace_id", "event_key", "state"], name="wake_event_idx"),
            # gc(): terminal rows by age.
            models.Index(
                fields=["updated_at"], condition=Q(state__in=TERMINAL_STATES), name="wake_terminal_updated_idx"
            ),
            models.Index(fields=["chain_id", "fire_at"], name="wake_chain_idx"),
            models.Index(fields=["session_id"], name="wake_session_idx"),
            # the limits page and the claim: pending wakes of a limit key (only rows that have one).
            models.Index(
                fields=["limit_key"],
                condition=Q(state=State.PENDING, limit_key__isnull=False),
                name="wake_pending_limit_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["workspace_id", "idempotency_key"], name="wake_idempotency_uniq"),
            models.CheckConstraint(
                condition=Q(lane_lock__isnull=True) | Q(state=State.FIRING, lane_lock=F("serial_key")),
                name="wake_lane_lock_only_when_firing",
            ),
            models.CheckConstraint(
                condition=~Q(state=State.FIRING) | Q(serial_key__isnull=True) | Q(lane_lock__isnull=False),
                name="wake_firing_holds_its_lane",
            ),
            models.CheckConstraint(
                condition=Q(coalesce_key__isnull=True) | Q(state=State.PENDING),
                name="wake_coalesce_only_when_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"wake {self.pk} ({self.kind}, {self.state})"

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def is_recurring(self) -> bool:
        return bool(self.cron) or self.every is not None


class WakeAttempt(models.Model):
    """One firing attempt: who ran it, when, and how it ended."""

    wake = models.ForeignKey(Wake, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField(_("attempt"))
    runner_id = models.CharField(_("runner"), max_length=KEY_LENGTH, blank=True, default="")
    fence = models.BigIntegerField(
        _("fencing token"), default=0, help_text=_("The fencing token of the claim this attempt ran under.")
    )
    started_at = InstantField(_("started"))
    finished_at = InstantField(_("finished"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=max(len(v) for v in Outcome.values), choices=Outcome.choices)
    error = models.TextField(_("error"), blank=True, default="")
    error_type = models.CharField(
        _("error type"), max_length=255, blank=True, default="", help_text=_("Dotted path of the exception's class.")
    )

    class Meta:
        verbose_name = _("wake attempt")
        verbose_name_plural = _("wake attempts")
        ordering = ["wake_id", "number", "id"]
        indexes = [
            models.Index(fields=["wake", "number"], name="wakeattempt_wake_idx"),
            # the dashboard and the metrics: attempts settled in the last hour/day by outcome (a time-windowed
            # scan). finished_at, not started_at: it is written when the row is, so a window never misses a
            # long sink's attempt recorded after the window moved on.
            models.Index(fields=["finished_at", "outcome"], name="wakeattempt_finished_idx"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of wake {self.wake_id}: {self.outcome}"


class ReceiptState(models.TextChoices):
    """Where a ``once()`` receipt is."""

    RUNNING = "running", _("running")
    """Committed before ``fn`` ran; ``fn`` has not finished (or its process died)."""
    DONE = "done", _("done")
    """``fn`` returned; ``result`` holds what it returned."""


class Receipt(models.Model):
    """The ``once()`` ledger: one row per (workspace, session, key) whose effect ran or is running."""

    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH, blank=True, default="")
    session_id = models.CharField(_("session"), max_length=KEY_LENGTH)
    key = models.CharField(_("key"), max_length=KEY_LENGTH)
    state = models.CharField(
        _("state"), max_length=max(len(v) for v in ReceiptState.values), choices=ReceiptState.choices
    )
    result = models.JSONField(_("result"), null=True, blank=True)
    owner = models.CharField(_("owner"), max_length=64, editable=False)
    lease_until = InstantField(_("lease until"))
    created_at = InstantField(_("created"))
    completed_at = InstantField(_("completed"), null=True, blank=True)

    class Meta:
        verbose_name = _("once receipt")
        verbose_name_plural = _("once receipts")
        constraints = [
            models.UniqueConstraint(fields=["workspace_id", "session_id", "key"], name="receipt_once_session_uniq")
        ]

    def __str__(self) -> str:
        return f"receipt {self.workspace_id}/{self.session_id}/{self.key} ({self.state})"


class WatchedKey(models.Model):
    """One more event key a watch fires on (``watch(event_keys=[...])``: any of several, first wins).

    The wake's own ``event_key`` holds the first key; each further key has a row here, so a delivery
    finds its watchers through two indexed lookups.
    """

    wake = models.ForeignKey(Wake, on_delete=models.CASCADE, related_name="watched_keys")
    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH)
    event_key = models.CharField(_("event key"), max_length=KEY_LENGTH)

    class Meta:
        verbose_name = _("watched event key")
        verbose_name_plural = _("watched event keys")
        indexes = [models.Index(fields=["workspace_id", "event_key"], name="watchedkey_lookup_idx")]
        constraints = [models.UniqueConstraint(fields=["wake", "event_key"], name="watchedkey_once_per_wake")]

    def __str__(self) -> str:
        return f"{self.event_key} for wake {self.wake_id}"


class RetainedEvent(models.Model):
    """A delivered event kept for a while (``deliver_event(retain=...)``), so a later ``watch(since=...)`` sees it."""

    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH)
    event_key = models.CharField(_("event key"), max_length=KEY_LENGTH)
    payload = models.JSONField(_("payload"), null=True, blank=True)
    delivered_at = InstantField(_("delivered"))
    expires_at = InstantField(_("kept until"))

    class Meta:
        verbose_name = _("retained event")
        verbose_name_plural = _("retained events")
        indexes = [
            models.Index(fields=["workspace_id", "event_key", "delivered_at"], name="retained_lookup_idx"),
            models.Index(fields=["expires_at"], name="retained_gc_idx"),
            models.Index(fields=["workspace_id", "delivered_at"], name="retained_cap_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_key} in {self.workspace_id} at {self.delivered_at:%Y-%m-%d %H:%M:%S}"


class EventKeyLock(models.Model):
    """One row per (workspace, event key) that retained deliveries and ``since`` watches lock.

    Both lock it before looking at the other's table, so a delivery and a watch of one key that
    commit at the same moment are serialised: one of them always sees the other.
    """

    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH)
    event_key = models.CharField(_("event key"), max_length=KEY_LENGTH)
    used_at = InstantField(_("last used"))

    class Meta:
        verbose_name = _("event key lock")
        verbose_name_plural = _("event key locks")
        constraints = [models.UniqueConstraint(fields=["workspace_id", "event_key"], name="eventkeylock_uniq")]
        indexes = [models.Index(fields=["used_at"], name="eventkeylock_gc_idx")]

    def __str__(self) -> str:
        return f"lock {self.workspace_id}/{self.event_key}"


class SessionControl(models.Model):
    """Per-session state the engine keeps: whether it is stopped, and when an agent last made a wake.

    A session is ``(workspace_id, session_id)``: tenants may use the same session ids, and one's
    stop, budget or cooldown never touches the other's. The row is also the lock that serialises
    budgeted creates of one session across processes.
    """

    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH)
    session_id = models.CharField(_("session"), max_length=KEY_LENGTH)
    stopped_at = InstantField(_("stopped"), null=True, blank=True)
    stop_reason = models.TextField(_("stop reason"), blank=True, default="")
    last_agent_wake_at = InstantField(_("last agent wake"), null=True, blank=True)
    updated_at = InstantField(_("updated"))

    class Meta:
        verbose_name = _("session")
        verbose_name_plural = _("sessions")
        constraints = [models.UniqueConstraint(fields=["workspace_id", "session_id"], name="sessioncontrol_uniq")]
        indexes = [models.Index(fields=["stopped_at"], name="sessioncontrol_stopped_idx")]

    def __str__(self) -> str:
        return f"session {self.workspace_id}/{self.session_id}" + (" (stopped)" if self.stopped_at else "")


class WorkspaceLock(models.Model):
    """A row per workspace that budgeted creates lock, so a workspace's live-wake cap holds across processes."""

    workspace_id = models.CharField(_("workspace"), max_length=KEY_LENGTH, unique=True)

    class Meta:
        verbose_name = _("workspace lock")
        verbose_name_plural = _("workspace locks")

    def __str__(self) -> str:
        return f"lock {self.workspace_id}"


class PausedLane(models.Model):
    """A lane an operator paused: its wakes stay pending (and keep their order) until it is resumed.

    A wake already firing in the lane finishes; no further wake of the lane is claimed while the row exists.
    """

    serial_key = models.CharField(_("lane"), max_length=KEY_LENGTH, unique=True)
    paused_at = InstantField(_("paused"))
    paused_by = models.CharField(_("paused by"), max_length=150, blank=True, default="")
    reason = models.TextField(_("reason"), blank=True, default="")

    class Meta:
        verbose_name = _("paused lane")
        verbose_name_plural = _("paused lanes")

    def __str__(self) -> str:
        return f"lane {self.serial_key} (paused)"


class Fence(models.Model):
    """The fencing-token sequence: each claim pass inserts one row, and its id fences that pass's claims.

    An auto-increment id taken after the claimed rows are locked is larger than any token an earlier
    claim of the same wake or lane got, on every database; ``gc`` deletes all but the newest row.
    """

    id = models.BigAutoField(primary_key=True)

    class Meta:
        verbose_name = _("fencing token")
        verbose_name_plural = _("fencing tokens")

    def __str__(self) -> str:
        return f"fence {self.pk}"


class LimitSlot(models.Model):
    """One of the N slots of a limit on one key or workspace (``WAKES["LIMITS"]``, ``WAKES["WORKSPACE_LIMIT"]``).

    A claim takes a free slot (locked ``SKIP LOCKED``) of each limit its wake is under, or leaves the wake
    pending. A slot is held while ``holder`` is firing under ``holder_token`` (the claim's token: ending
    the claim frees it); a rate slot rests until ``free_at``, its last start plus the period
    (:mod:`django_wakes.engine.limit_slots`).
    """

    scope = models.CharField(_("scope"), max_length=max(map(len, states.LimitScope)), choices=states.LimitScope.choices)
    name = models.CharField(_("key or workspace"), max_length=KEY_LENGTH)
    kind = models.CharField(_("limit"), max_length=max(map(len, states.LimitKind)), choices=states.LimitKind.choices)
    number = models.PositiveIntegerField(_("slot"))
    holder = models.BigIntegerField(_("held by wake"), null=True, blank=True)
    holder_token = models.CharField(_("held under claim"), max_length=32, null=True, blank=True, editable=False)
    free_at = InstantField(_("free from"), null=True, blank=True, help_text=_("A rate slot: its last start + period."))
    used_at = InstantField(_("last taken"))

    class Meta:
        verbose_name = _("limit slot")
        verbose_name_plural = _("limit slots")
        constraints = [models.UniqueConstraint(fields=["scope", "name", "kind", "number"], name="limitslot_uniq")]
        # usage(): slots held by firing wakes, and rate slots resting until free_at.
        indexes = [
            models.Index(fields=["holder"], name="limitslot_holder_idx"),
            models.Index(fields=["free_at"], name="limitslot_free_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} slot {self.number} of {self.scope} {self.name}"


class Runner(models.Model):
    """A live (or recently live) ``runwakes`` process, for operators."""

    id = models.CharField(_("runner"), max_length=KEY_LENGTH, primary_key=True)
    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("pid"))
    started_at = InstantField(_("started"))
    heartbeat_at = InstantField(_("last heartbeat"))
    kinds = models.JSONField(
        _("kinds it fires"),
        null=True,
        blank=True,
        help_text=_(
            "The kinds this runner registered sinks for when it started (null: not recorded). "
            "The admin's unwakeable filter asks the live runners, not its own registry."
        ),
    )

    objects = RunnerQuerySet.as_manager()

    class Meta:
        verbose_name = _("runner")
        verbose_name_plural = _("runners")
        indexes = [models.Index(fields=["heartbeat_at"], name="runner_heartbeat_idx")]

    def __str__(self) -> str:
        return f"{self.id} on {self.host} (pid {self.pid})"

    @property
    def is_live(self) -> bool:
        """Whether its heartbeat is recent enough (the rule of :meth:`RunnerQuerySet.live`)."""
        return self.heartbeat_at >= live_since()
