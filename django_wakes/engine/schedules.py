"""Operator transitions on a recurring chain: pause, resume, trigger now, backfill.

A chain has no row of its own: it is its occurrences (``chain_id``), of which one recurring row is
live (pending or firing) at a time. So each transition here works on rows, under the same rules as
the rest of the engine:

* **pause** holds the chain's pending occurrences: their ``due_at`` is cleared (the claim query
  never sees them, and :meth:`~django_wakes.querysets.WakeQuerySet.lock_pending` refuses a row whose
  ``due_at`` was cleared after a runner read it as a candidate) and kept in ``paused_due_at``; each
  is a compare-and-swap on the ``due_at`` read. A *firing* occurrence cannot be held: it finishes,
  with its retries, but it is marked ``paused_at`` too, and the settle that books its successor
  re-reads the mark under the row's lock (:func:`~.create.book_next`), so the successor is booked held.
  Pause first locks the live rows (``SELECT ... FOR UPDATE``, no skip), so a settle that is booking
  the successor at that moment finishes first, and the UPDATE that follows, a new statement, sees it.
* **resume** gives each held occurrence its ``due_at`` back. One held long past its slot is then
  late like after any downtime: the chain's ``catch_up`` policy decides what the missed slots do.
* **trigger now** books one extra firing now: a one-shot row of the chain (not recurring, so it books
  nothing after it) handed ``{"slot": now, "manual": true}``. The grid and the live occurrence are
  untouched. A ``request_id`` (the admin's form sends one) makes a resubmitted form book once.
* **backfill** books the chain's slots in a past range that never fired, each as a one-shot row keyed
  :func:`~django_wakes.schedules.recurrence.chain_key` — the key the chain itself books that slot under — so
  running it twice, or racing the chain, books no slot twice. Only slots before the live occurrence
  are backfilled: those after it are the chain's own to fire (and its catch-up policy's to fold).

Each transition returns what happened, for the operator, or raises
:class:`~django_wakes.exceptions.OperationRefused` (it does not apply to the chain as it is now) or
:class:`~django_wakes.exceptions.InvalidSchedule` (bad input); nothing is half-written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce

from .. import clock
from ..conf import wakes_settings
from ..exceptions import InvalidSchedule, OperationRefused
from ..models import State, Wake
from ..schedules import recurrence
from ..timeutil import to_datetime
from ..validation import key
from .insert import create_wake
from .shared import announce_due, db_alias, retry_rolled_back

__all__ = [
    "MAX_BACKFILL",
    "Backfill",
    "backfill_chain",
    "backfill_floor",
    "chain_template",
    "pause_chain",
    "resume_chain",
    "trigger_chain",
]

#: One backfill books at most this many slots (a longer range: several backfills, or a mistake).
MAX_BACKFILL = 1000
CHAIN_ID_LENGTH: int = Wake._meta.get_field("chain_id").max_length or 32
#: Rows that still belong to the chain's future: a held or due occurrence, or one firing now.
LIVE = (State.PENDING, State.FIRING)
_TINY = timedelta(microseconds=1)
_RECURRING = ~Q(cron="") | Q(every__isnull=False)
#: The fields that make a row recur, cleared: such a row fires once and books no successor.
_NOT_RECURRING: dict[str, Any] = {"cron": "", "every": None, "catch_up": "", "dst_ambiguous": "", "dst_missing": ""}


def _chain_id(value: Any) -> str:
    return key(value, name="chain_id", max_length=CHAIN_ID_LENGTH)


def _rows(using: str, chain_id: str) -> QuerySet[Wake]:
    return Wake.objects.using(using).filter(chain_id=chain_id)


def chain_template(chain_id: str, *, using: str | None = None) -> Wake:
    """The chain's newest recurring occurrence: the schedule and fields its next rows are made from.

    Raise :class:`OperationRefused` if no recurring row has this ``chain_id``.
    """
    chain_id = _chain_id(chain_id)
    row = _rows(using or db_alias(), chain_id).filter(_RECURRING).order_by("-fire_at", "-id").first()
    if row is None:
        raise OperationRefused(f"there is no chain {chain_id!r}")
    return row


def _lock_live(using: str, chain_id: str) -> list[Wake]:
    """Lock the chain's live rows, waiting (no skip) for a claim or settle that holds one to commit.

    Read twice: a settle we waited for has moved its row out of ``LIVE`` and booked the successor,
    which the first statement cannot see (it was not committed when the statement began); the
    second statement, under READ COMMITTED a new snapshot and on MySQL a locking read of the latest
    rows, sees and locks it.
    """
    live = _rows(using, chain_id).filter(state__in=LIVE).select_for_update().order_by("id")
    list(live)
    return list(live.all())


def pause_chain(chain_id: str) -> str:
    """Hold a chain: its pending occurrences stop being claimable until :func:`resume_chain`.

    An occurrence firing right now finishes (retries included); the one it books is booked held. A
    firing booked by :func:`trigger_chain` is not held: the operator asked for that one.
    """
    chain_id = _chain_id(chain_id)
    using = db_alias()
    template = chain_template(chain_id, using=using)

    def attempt() -> tuple[int, int]:
        now = clock.now()
        with transaction.atomic(using=using):
            live = [row for row in _lock_live(using, chain_id) if row.is_recurring]
            if not live:
                raise OperationRefused(f"chain {chain_id} has no pending or firing occurrence: it has ended")
            if all(row.paused_at is not None for row in live):
                raise OperationRefused(f"chain {chain_id} is already paused")
            held = 0
            # A new statement: it also sees an occurrence a settle booked while we waited for the lock.
            pending = _rows(using, chain_id).filter(state=State.PENDING, paused_at__isnull=True)
            for row in pending.select_for_update().order_by("id"):
                if isinstance(row.result, dict) and row.result.get("manual"):
                    continue  # fired by hand: the operator asked for that one firing
                held += (
                    Wake.objects.using(using)
                    .filter(pk=row.pk, state=State.PENDING, paused_at__isnull=True, due_at=row.due_at)
                    .update(paused_at=now, paused_due_at=row.due_at, due_at=None, updated_at=now)
                )
            firing = (
                _rows(using, chain_id)
                .filter(state=State.FIRING, paused_at__isnull=True)
                .update(paused_at=now, updated_at=now)
            )
            return held, firing

    held, firing = retry_rolled_back("pausing a chain", attempt)
    said = [f"Chain {chain_id} ({template.kind}) is paused: {held} pending occurrence(s) held."]
    if firing:
        said.append(f"{firing} occurrence(s) firing now finish; the next one is booked held.")
    return " ".join(said)


def resume_chain(chain_id: str) -> str:
    """Give a paused chain's held occurrences their ``due_at`` back; the catch-up policy handles lateness."""
    chain_id = _chain_id(chain_id)
    using = db_alias()
    template = chain_template(chain_id, using=using)

    def attempt() -> int:
        now = clock.now()
        with transaction.atomic(using=using):
            # Every live row, one-shots too: a chain that ended while paused (its held occurrence cancelled,
            # its sink returned Stop()) may leave held backfill rows that nothing else would ever release.
            live = _lock_live(using, chain_id)
            if not any(row.paused_at is not None for row in live):
                raise OperationRefused(f"chain {chain_id} is not paused")
            rows = _rows(using, chain_id).filter(paused_at__isnull=False)
            # An operator's own move of one held row (fire now, reschedule) gave it a due_at: it keeps it.
            resumed = rows.filter(state=State.PENDING).update(
                due_at=Coalesce(
                    F("due_at"), F("paused_due_at"), Value(now, output_field=Wake._meta.get_field("due_at"))
                ),
                paused_at=None,
                paused_due_at=None,
                updated_at=now,
            )
            rows.filter(state=State.FIRING).update(paused_at=None, updated_at=now)
            announce_due(using, now)
            return resumed

    resumed = retry_rolled_back("resuming a chain", attempt)
    late = "" if template.catch_up in ("", "replay") else f" (catch-up {template.catch_up!r} applies to missed slots)"
    return f"Chain {chain_id} ({template.kind}) is resumed: {resumed} occurrence(s) due again{late}."


def _one_shot(template: Wake, slot: datetime, result: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """The fields of an extra, non-recurring row of ``template``'s chain at ``slot`` (it books no successor)."""
    fields = recurrence.occurrence_fields(template, slot, None)
    fields.update(
        _NOT_RECURRING,
        start_at=None,
        end_at=None,
        occurrence=template.occurrence,
        result=result,
        idempotency_key=idempotency_key,
    )
    return fields


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def trigger_chain(chain_id: str, *, request_id: str | None = None) -> Wake:
    """Book one extra firing of the chain, due now; the grid and the live occurrence are untouched.

    The row is handed ``{"trigger": "at", "slot": <now>, "manual": true}``. The same ``request_id``
    twice books one row (the admin's form carries one, so a resubmitted form does not fire twice).
    """
    chain_id = _chain_id(chain_id)
    template = chain_template(chain_id)
    request = key(request_id, name="request_id", required=False, max_length=64) or uuid.uuid4().hex
    now = clock.now()
    result = {"trigger": "at", "slot": _iso(now), "manual": True}
    wake = create_wake(_one_shot(template, now, result, f"chain:{chain_id}:manual:{request}"), now=now)
    announce_due(db_alias(), now)
    return wake


@dataclass(frozen=True)
class Backfill:
    """What :func:`backfill_chain` did: the rows it booked and why the other slots of the range were not."""

    chain_id: str
    start: datetime
    end: datetime
    booked: list[Wake] = field(default_factory=list)
    revived: int = 0
    had_occurrence: int = 0
    cancelled: int = 0
    after_live: int = 0
    after_end: int = 0
    gc_cut: datetime | None = None  # slots before this were left out: gc may have deleted their rows

    @property
    def message(self) -> str:
        parts = [f"Backfill of chain {self.chain_id}: {len(self.booked)} slot(s) booked"]
        if self.revived:
            parts.append(f"{self.revived} of them skipped earlier by catch-up")
        if self.had_occurrence:
            parts.append(f"{self.had_occurrence} slot(s) already had an occurrence")
        if self.cancelled:
            parts.append(f"{self.cancelled} cancelled by an operator, left cancelled")
        if self.after_live:
            parts.append("slots from the live occurrence on are the chain's own")
        if self.after_end:
            parts.append("slots after the chain's last occurrence are not backfilled: the chain has ended")
        if self.gc_cut is not None:
            parts.append(
                f"slots before {_iso(self.gc_cut)} are not backfilled: gc may have deleted the rows of those that"
                " fired (WAKES['GC_AFTER'])"
            )
        return "; ".join(parts) + "."


def _slots(grid: recurrence.Grid, start: datetime, until: datetime) -> list[datetime]:
    slots: list[datetime] = []
    moment = start - _TINY
    while (slot := grid.next_after(moment)) is not None and slot <= until:
        slots.append(slot)
        moment = slot
    return slots


def _covered(using: str, chain_id: str, start: datetime, until: datetime) -> set[datetime]:
    """Slots of ``[start, until]`` some occurrence already fired (or will) for, its own or a newer one.

    A ``catch_up="latest"`` firing stands for a newer slot than its row's (``result["slot"]``); that
    row may be the chain's newest recurring row before ``start``.
    """
    rows = _rows(using, chain_id).exclude(state__in=(State.CANCELLED, State.SUPERSEDED))
    window = list(rows.filter(fire_at__gte=start, fire_at__lte=until).values_list("result", flat=True))
    before = rows.filter(_RECURRING, fire_at__lt=start)  # not a one-shot booked by hand or by a backfill
    window += list(before.order_by("-fire_at").values_list("result", flat=True)[:1])
    covered = set()
    for result in window:
        slot = result.get("slot") if isinstance(result, dict) else None
        if isinstance(slot, str):
            try:
                covered.add(datetime.fromisoformat(slot).astimezone(UTC))
            except ValueError:
                continue
    return covered


def backfill_floor(
    template: Wake, *, now: datetime, using: str | None = None
) -> tuple[datetime | None, datetime | None]:
    """The earliest slot a backfill of ``template``'s chain may book, and the gc horizon if there is one.

    Not before the chain began (its ``start_at``, its occurrence 0: slots before were never its to
    miss), and not before ``now - WAKES["GC_AFTER"]``: gc deletes settled rows older than that, so an
    older slot's row may be gone although the slot fired, and booking it would fire it again.
    """
    using = using or db_alias()
    # The chain's first slot: its occurrence 0 (one-shot rows copy a template's number, never an earlier slot).
    first = (
        _rows(using, template.chain_id or "")
        .filter(occurrence=0)
        .order_by("fire_at")
        .values_list("fire_at", flat=True)
        .first()
    )
    gc_after = wakes_settings.gc_after
    kept_since = now - gc_after if gc_after is not None else None
    floors = [moment for moment in (template.start_at, first, kept_since) if moment is not None]
    return (max(floors) if floors else None), kept_since


def backfill_chain(chain_id: str, *, start: datetime | int | float, end: datetime | int | float) -> Backfill:
    """Book every slot of ``[start, end]`` that never fired, as one-shot rows due at once, oldest first.

    Idempotent per slot: each row has the slot's chain key, so a slot that has a row (fired, pending,
    dead, or booked by an earlier backfill) books nothing. A slot ``catch_up="skip"`` closed without
    firing is revived (its row becomes a pending one-shot); one an operator cancelled stays cancelled.
    Slots after now, after the chain's ``end_at``, before its first occurrence, older than
    ``WAKES["GC_AFTER"]`` (gc may have deleted the row of a slot that fired), from its live occurrence
    on, or (a chain that has ended) after its last occurrence are not backfilled. A held (paused)
    chain gets held rows. At most :data:`MAX_BACKFILL` slots.
    """
    chain_id = _chain_id(chain_id)
    begin = to_datetime(start, name="start")
    finish = to_datetime(end, name="end")
    if finish < begin:
        raise InvalidSchedule(f"backfill: end {finish.isoformat()} is before start {begin.isoformat()}")
    using = db_alias()
    template = chain_template(chain_id, using=using)
    grid = recurrence.grid_for(template)
    now = clock.now()
    if begin > now:
        raise InvalidSchedule(f"backfill: start {begin.isoformat()} is in the future; only past slots are backfilled")
    floor, kept_since = backfill_floor(template, now=now, using=using)
    gc_cut = kept_since if kept_since is not None and begin < kept_since else None
    if floor is not None:
        begin = max(begin, floor)
    until = min(finish, now, *(m for m in (template.end_at,) if m is not None))

    def attempt() -> Backfill:
        with transaction.atomic(using=using):
            live = [row for row in _lock_live(using, chain_id) if row.is_recurring and row.fire_at is not None]
            horizon = until
            after_live = after_end = 0
            if live:
                first_live = min(row.fire_at for row in live if row.fire_at is not None)
                if first_live <= horizon:
                    after_live = 1
                    horizon = first_live - _TINY
            else:
                # The chain has ended (an operator cancelled its occurrence, its sink returned Stop(), its
                # session was stopped): the slots after its last occurrence were never its own to fire.
                last = (
                    _rows(using, chain_id)
                    .filter(_RECURRING)
                    .order_by("-fire_at", "-id")
                    .values_list("fire_at", flat=True)
                    .first()
                )
                if last is not None and last < horizon:
                    after_end = 1
                    horizon = last
            paused_at = next((row.paused_at for row in live if row.paused_at is not None), None)
            if horizon < begin:
                return Backfill(chain_id, begin, finish, after_live=after_live, after_end=after_end, gc_cut=gc_cut)
            count = grid.count(begin - _TINY, horizon)
            if count > MAX_BACKFILL:
                raise InvalidSchedule(
                    f"backfill: {count} slots between {begin.isoformat()} and {horizon.isoformat()};"
                    f" at most {MAX_BACKFILL} at once"
                )
            slots = _slots(grid, begin, horizon)
            covered = _covered(using, chain_id, begin, horizon)
            at_slot: dict[datetime, list[Wake]] = {}
            for row in _rows(using, chain_id).filter(fire_at__gte=begin, fire_at__lte=horizon):
                assert row.fire_at is not None  # the filter says so
                at_slot.setdefault(row.fire_at, []).append(row)
            booked: list[Wake] = []
            revived = had = cancelled = 0
            for slot in slots:
                result = {"trigger": "at", "slot": _iso(slot), "backfill": True}
                there = at_slot.get(slot, [])
                skipped = [r for r in there if r.state == State.CANCELLED and (r.result or {}).get("skipped")]
                if slot in covered or any(r.state not in (State.CANCELLED, State.SUPERSEDED) for r in there):
                    had += 1
                elif skipped:
                    if _revive(using, skipped[0], result, paused_at, now):
                        skipped[0].refresh_from_db(using=using)
                        booked.append(skipped[0])
                        revived += 1
                    else:
                        had += 1  # another backfill revived it a moment ago
                elif there:
                    cancelled += 1
                else:
                    chain_key = recurrence.chain_key(chain_id, slot)
                    wake = create_wake(_held(_one_shot(template, slot, result, chain_key), paused_at), now=now)
                    if wake.created_at == now and wake.result == result:
                        booked.append(wake)
                    else:
                        had += 1  # another backfill booked it a moment ago
            if booked:
                announce_due(using, now)
            return Backfill(chain_id, begin, finish, booked, revived, had, cancelled, after_live, after_end, gc_cut)

    return retry_rolled_back("backfilling a chain", attempt)


def _held(fields: dict[str, Any], paused_at: datetime | None) -> dict[str, Any]:
    """Book a backfilled row held when its chain is paused (resume gives it its due_at)."""
    if paused_at is None:
        return fields
    return {**fields, "paused_at": paused_at, "paused_due_at": fields["due_at"], "due_at": None}


def _revive(using: str, row: Wake, result: dict[str, Any], paused_at: datetime | None, now: datetime) -> bool:
    """Turn a slot catch-up skipped (cancelled, never fired) into a pending one-shot: a compare-and-swap."""
    assert row.fire_at is not None  # an occurrence row always has its slot
    return bool(
        Wake.objects.using(using)
        .filter(_RECURRING, pk=row.pk, state=State.CANCELLED)  # revived once: then it is a pending one-shot
        .update(
            **_NOT_RECURRING,
            state=State.PENDING,
            result=result,
            end_at=None,
            **_held({"due_at": row.fire_at, "paused_at": None, "paused_due_at": None}, paused_at),
            attempts=0,
            settled_at=None,
            updated_at=now,
        )
    )
