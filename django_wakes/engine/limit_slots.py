"""Limits enforced by the database: a claim takes a slot per limit its wake is under, or leaves it pending.

Each limit on a key or workspace (:mod:`.limit_rules`) has ``N`` :class:`~django_wakes.models.LimitSlot`
rows, made on demand. Inside the claim transaction (after the wakes are locked), :func:`admit` locks
the slots of the limits in play ``SKIP LOCKED``, keeps those that are free, and gives each wake, in
claim order, one free slot of every limit it is under; a wake short of one is not claimed this pass.
It stays ``pending``: no attempt, no charge, no write. Two runners never take one slot (the row lock),
so across processes and machines:

* **concurrency**: a slot is held while its ``holder`` wake is ``firing`` under ``holder_token`` (the
  claim's token). Every exit from ``firing`` (settled, retried, deferred, handed back, dead,
  superseded) ends that claim, so it frees the slot with no write of its own; a lease takeover
  moves the slot to the new claim (:func:`taken_over`). At most N wakes of the key are firing.
* **rate**: a slot is held by its claim until the sink starts; :func:`started`, right before the sink
  runs, records the start and rests the slot for the period (``free_at``). Each slot starts at most one
  sink per period, so at most N sinks start in any window of the period. A claim handed back unstarted
  frees the slot without using it. A lease takeover of a started wake is a new start: it takes a free
  slot, or the wake goes back to ``pending`` until one frees (:func:`taken_over`).

Which keys and workspaces are full right now is one grouped read of the busy slots
(:func:`usage`): the claim's candidate read leaves those wakes out (:func:`without_held`), and reads
once more past a key or workspace that ran out of slots during the pass (:func:`past_short`), so a
backlog held by a limit never crowds other wakes out of a batch, and the console says which limit holds a
wake and until when (:func:`hold_of`). None of this runs while no limit is configured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import BigIntegerField, Case, Count, Exists, Min, OuterRef, Q, Value, When

from .. import clock
from ..logs import about
from ..models import LimitSlot, State, Wake
from ..querysets import WakeQuerySet
from ..states import LimitKind
from . import limit_rules
from .limit_rules import Limit, Rules
from .shared import logger

if TYPE_CHECKING:
    from .leases import Claim

Bucket = tuple[str, str, str]


@dataclass(frozen=True)
class Usage:
    """One limit's slots now: how many are in use (firing, or started within the period) and when one rests until."""

    in_use: int
    #: The earliest moment a resting rate slot is free again (``None``: none rests; a held slot frees on settle).
    until: datetime | None


@dataclass(frozen=True)
class Hold:
    """Why a due wake is not claimed: the limit that is full, how full, and until when (``None``: a slot frees)."""

    limit: Limit
    in_use: int
    until: datetime | None

    def text(self, when: str | None = None) -> str:
        """``held by limit "mailer" (concurrency 5): 5 firing, until one of them settles`` (``when``: as shown)."""
        used = "started in the period" if self.limit.kind == LimitKind.RATE else "firing"
        return f"held by {self.limit.label}: {self.in_use} {used}, {self.later(when)}"

    def later(self, when: str | None = None) -> str:
        """Until when: a rate slot's rest (``when``, else :attr:`until` in ISO 8601), or a firing wake's settle."""
        if self.limit.kind == LimitKind.RATE and self.until is not None:
            return f"until {when or self.until.isoformat()}"
        if self.limit.kind == LimitKind.RATE:
            return "until a claimed wake starts and its period passes"
        return "until one of them settles"


def _live(using: str) -> Exists:
    """The slot's holder is still firing under the claim that took the slot (so the slot is held)."""
    holder = Wake.objects.using(using).filter(
        pk=OuterRef("holder"), state=State.FIRING, claim_token=OuterRef("holder_token")
    )
    return Exists(holder)


def usage(using: str, now: datetime) -> dict[Bucket, Usage]:
    """Busy slots per limit: held by a firing claim, or resting (a rate slot within its period); no locks.

    Read from the firing wakes' side (few, and indexed) and from the resting slots (``free_at > now``),
    so its cost follows what is busy now, never the number of slots or keys ever used.
    """
    slots = LimitSlot.objects.using(using)
    firing = Wake.objects.using(using).filter(state=State.FIRING).values("pk")
    held = slots.filter(holder__in=firing).filter(_live(using)).values("scope", "name", "kind")
    resting = slots.filter(free_at__gt=now).values("scope", "name", "kind")
    found: dict[Bucket, Usage] = {}
    for row in held.annotate(n=Count("id")).order_by():
        found[(row["scope"], row["name"], row["kind"])] = Usage(row["n"], None)
    for row in resting.annotate(n=Count("id"), until=Min("free_at")).order_by():
        bucket = (row["scope"], row["name"], row["kind"])
        before = found.get(bucket)
        found[bucket] = Usage(row["n"] + (before.in_use if before else 0), row["until"])
    return found


def full(using: str, now: datetime, rules: Rules) -> dict[Bucket, Hold]:
    """The limits that are full now (every slot busy), as their rules say now."""
    holds = {}
    for (scope, name, kind), used in usage(using, now).items():
        limits = rules.key_limits(name) if scope == "key" else rules.workspace_limits(name)
        for limit in limits:
            if limit.kind == kind and used.in_use >= limit.size:
                holds[limit.bucket] = Hold(limit, used.in_use, used.until)
    return holds


def without_held(candidates: WakeQuerySet, using: str, now: datetime) -> WakeQuerySet:
    """Leave out of a claim's candidates the wakes of full keys and workspaces (no cost without limits)."""
    if not limit_rules.active():
        return candidates
    holds = full(using, now, limit_rules.current())
    keys = {name for scope, name, _kind in holds if scope == "key"}
    workspaces = {name for scope, name, _kind in holds if scope == "workspace"}
    if keys:
        candidates = candidates.exclude(limit_key__in=sorted(keys))
    if workspaces:
        candidates = candidates.exclude(workspace_id__in=sorted(workspaces))
    return candidates


def past_short(candidates: WakeQuerySet, short: set[Bucket], read: list[int]) -> WakeQuerySet:
    """The candidates a claim reads again when a limit came up short: without its wakes, nor those ``read``.

    :func:`without_held` leaves out only the full limits: a key with one free slot still fills every
    place of a batch with its backlog, of which :func:`admit` lets one through. The claim then reads
    once more, in its transaction, past the keys and workspaces that ran out of slots (``short``).
    """
    keys = sorted({name for scope, name, _kind in short if scope == "key"})
    workspaces = sorted({name for scope, name, _kind in short if scope == "workspace"})
    again = candidates.exclude(pk__in=read)
    if keys:
        again = again.exclude(limit_key__in=keys)
    if workspaces:
        again = again.exclude(workspace_id__in=workspaces)
    return again


def admit(using: str, rows: list[Wake], now: datetime, token: str, short: set[Bucket] | None = None) -> list[Wake]:
    """Inside the claim transaction: the wakes of ``rows`` that get a slot of each of their limits, in order.

    The slots are locked ``SKIP LOCKED`` (one read for every limit in play), the holders of held ones
    checked, and each admitted wake's slots written to the claim (``token``): they are its until it
    leaves ``firing`` (concurrency) or starts (rate). The others stay pending, untouched; the limits
    they were short of are added to ``short`` (the claim reads again past them: :func:`past_short`).
    """
    if not rows or not limit_rules.active():
        return rows
    rules = limit_rules.current()
    wanted = {wake.pk: rules.of(wake.limit_key, wake.workspace_id) for wake in rows}
    if not any(wanted.values()):
        return rows
    needs: dict[Bucket, tuple[Limit, int]] = {}
    for found in wanted.values():
        for limit in found:
            needs[limit.bucket] = (limit, needs.get(limit.bucket, (limit, 0))[1] + 1)
    free = _free_slots(using, needs, now)
    admitted: list[Wake] = []
    taken: list[tuple[LimitSlot, Wake]] = []
    for wake in rows:
        need = wanted[wake.pk]
        lacking = [limit for limit in need if not free.get(limit.bucket)]
        if lacking:
            if short is not None:
                short.update(limit.bucket for limit in lacking)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("wake %s waits: %s is full", wake.pk, lacking[0].label, extra=about(wake))
            continue
        taken.extend((free[limit.bucket].pop(0), wake) for limit in need)
        admitted.append(wake)
    if taken:  # one statement: each slot's holder, the claim's token
        holder = Case(*(When(pk=slot.pk, then=Value(wake.pk)) for slot, wake in taken), output_field=BigIntegerField())
        LimitSlot.objects.using(using).filter(pk__in=[slot.pk for slot, _ in taken]).update(
            holder=holder, holder_token=token, used_at=now
        )
    return admitted


def _free_slots(using: str, needs: dict[Bucket, tuple[Limit, int]], now: datetime) -> dict[Bucket, list[LimitSlot]]:
    """Per limit, lock up to as many free slots as this pass could use (making missing ones first).

    The locking read keeps only slots that look free and passes over those another claim has locked
    (``SKIP LOCKED``); whether a locked slot's holder is still firing is then read again in a
    statement of its own, which sees every claim committed before the lock was had.
    """
    rows: list[LimitSlot] = []
    for limit, count in needs.values():
        found = _lock_free(using, limit, now, count)
        if len(found) < count and _make_missing(using, limit, now):
            found = _lock_free(using, limit, now, count)
        rows.extend(found)
    holders = [slot.holder for slot in rows if slot.holder_token is not None and slot.holder is not None]
    live = (
        set(Wake.objects.using(using).filter(pk__in=holders, state=State.FIRING).values_list("pk", "claim_token"))
        if holders
        else set()
    )
    free: dict[Bucket, list[LimitSlot]] = {}
    for slot in rows:
        if slot.holder_token is None or (slot.holder, slot.holder_token) not in live:
            free.setdefault((slot.scope, slot.name, slot.kind), []).append(slot)
    return free


def _of(using: str, limit: Limit) -> Any:
    return LimitSlot.objects.using(using).filter(
        scope=limit.scope, name=limit.name, kind=limit.kind, number__lt=limit.size
    )


def _lock_free(using: str, limit: Limit, now: datetime, count: int) -> list[LimitSlot]:
    """Up to ``count`` slots of ``limit`` that look free, locked ``SKIP LOCKED`` (lowest numbers first)."""
    looks_free = (Q(free_at__isnull=True) | Q(free_at__lte=now)) & (Q(holder_token__isnull=True) | ~_live(using))
    rows = _of(using, limit).filter(looks_free).select_for_update(skip_locked=True).order_by("number")
    return list(rows[:count])


def _make_missing(using: str, limit: Limit, now: datetime) -> bool:
    """Insert the slots this limit does not have yet (a first claim of the key, or a larger N); say if any."""
    if _of(using, limit).count() >= limit.size:
        return False
    existing = set(_of(using, limit).values_list("number", flat=True))
    missing = [
        LimitSlot(scope=limit.scope, name=limit.name, kind=limit.kind, number=number, used_at=now)
        for number in range(limit.size)
        if number not in existing
    ]
    LimitSlot.objects.using(using).bulk_create(missing, ignore_conflicts=True)
    return bool(missing)


#: How much longer than its period a rate slot rests, at most: the time between the start the runner
#: records and its sink's first instruction (a commit, a little Python, a busy CPU). Never more than a
#: tenth of the period. 50 ms was measured too short on a loaded 2-core machine (a sink-measured start
#: 60-120 ms after the recorded one, so 5 starts in a 1 s window of a 4/1s key).
START_MARGIN = timedelta(milliseconds=250)


def started(using: str, claim: Claim) -> None:
    """Right before a rate-limited wake's sink runs: record the start, rest its rate slots for their period.

    The slots are locked first and the time read only then, so a claim pass holding one of them locked
    (it is waited for) does not make the recorded start earlier than the sink's.
    """
    if not limit_rules.active():
        return
    wake = claim.wake
    rates = [
        limit for limit in limit_rules.current().of(wake.limit_key, wake.workspace_id) if limit.kind == LimitKind.RATE
    ]
    if not rates:
        return
    with transaction.atomic(using=using):
        mine = LimitSlot.objects.using(using).filter(holder=wake.pk, holder_token=claim.token, kind=LimitKind.RATE)
        held = {(slot.scope, slot.name): slot.pk for slot in mine.select_for_update()}
        now = clock.now()
        for limit in rates:
            pk = held.get((limit.scope, limit.name))
            if pk is not None and limit.period is not None:
                rest = limit.period + min(START_MARGIN, limit.period / 10)
                LimitSlot.objects.using(using).filter(pk=pk).update(holder=None, holder_token=None, free_at=now + rest)


def taken_over(using: str, wake: Wake, old_token: str | None, new_token: str, now: datetime) -> bool:
    """A lapsed lease is being taken over: move the wake's slots to the new claim; say if it may be re-driven.

    Its concurrency slots, and a rate slot its claim still holds (the sink never started), go to the
    new claim. A rate slot its sink's start put to rest is no longer the wake's, and the re-drive is a
    new start: it takes a free slot of that limit, locked as :func:`admit` locks them. With none free,
    ``False`` and nothing written: the caller puts the wake back to ``pending`` (which frees its other
    slots), to be claimed once the limit has room, its start counted like any other.
    """
    if old_token is None or not limit_rules.active():
        return True
    slots = LimitSlot.objects.using(using)
    mine = slots.filter(holder=wake.pk, holder_token=old_token)
    rates = [lim for lim in limit_rules.current().of(wake.limit_key, wake.workspace_id) if lim.kind == LimitKind.RATE]
    if rates:
        held = set(mine.filter(kind=LimitKind.RATE).values_list("scope", "name"))
        gone = [limit for limit in rates if (limit.scope, limit.name) not in held]
        free = _free_slots(using, {limit.bucket: (limit, 1) for limit in gone}, now) if gone else {}
        if any(not free.get(limit.bucket) for limit in gone):
            return False
        if gone:
            taken = [free[limit.bucket][0].pk for limit in gone]
            slots.filter(pk__in=taken).update(holder=wake.pk, holder_token=new_token, used_at=now)
    mine.update(holder_token=new_token)
    return True


def forget_idle(using: str, cutoff: datetime, now: datetime) -> int:
    """Delete the slots not taken since ``cutoff`` that are neither held nor resting (gc); return how many.

    A key used once leaves its N rows behind; a claim makes them again when the key comes back. A
    slot a claim takes meanwhile has ``used_at`` moved on, which the delete checks again once the
    claim's lock is released.
    """
    idle = (
        LimitSlot.objects.using(using).filter(used_at__lt=cutoff).filter(Q(free_at__isnull=True) | Q(free_at__lte=now))
    )
    deleted: int = idle.filter(Q(holder_token__isnull=True) | ~_live(using)).delete()[0]
    return deleted


def hold_of(wake: Wake, holds: dict[Bucket, Hold], now: datetime) -> Hold | None:
    """The full limit holding this due pending wake back (:func:`full`'s answer), or ``None``."""
    if wake.state != State.PENDING or wake.due_at is None or wake.due_at > now or not holds:
        return None
    for limit in limit_rules.current().of(wake.limit_key, wake.workspace_id):
        hold = holds.get(limit.bucket)
        if hold is not None:
            return hold
    return None


_told: set[str] = set()


def note_unlimited(claims: list[Claim]) -> None:
    """At DEBUG (``runwakes -v 2``), say once per key that a claimed wake's ``limit_key`` matches no limit."""
    if not logger.isEnabledFor(logging.DEBUG):
        return
    rules: Rules | None = None
    for claim in claims:
        name = claim.wake.limit_key
        if name is None or name in _told:
            continue
        rules = rules or limit_rules.current()
        if rules.matching(name) is None:
            if len(_told) > 1000:
                _told.clear()
            _told.add(name)
            logger.debug("limit_key %r matches no WAKES['LIMITS'] entry: its wakes are not limited", name)
