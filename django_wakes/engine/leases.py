"""A claim and its lease: :class:`Claim` (what a runner holds), the fencing token, renewing leases.

A claim's lease is renewed by its runner's heartbeat (:func:`renew_leases`), conditioned on the
claim token: a claim another runner took over is never touched. Fencing tokens are drawn after the
claimed rows are locked (:func:`next_fence`), so each is larger than any earlier claim's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .. import clock
from ..models import Fence, State, Wake
from .shared import db_alias


@dataclass
class Claim:
    """A wake this runner holds a lease on, with the result it must hand to the sink."""

    wake: Wake
    #: The claim token every settle and renewal is conditioned on; left out of ``repr()``, as the console hides it.
    token: str = field(repr=False)
    runner_id: str
    started_at: datetime
    expired: bool
    takeover: bool = False
    #: This claim's ``wakes.fire`` span while tracing (:mod:`django_wakes.tracing`), else None.
    trace: Any = field(default=None, repr=False, compare=False)

    @property
    def result(self) -> dict[str, Any]:
        return self.wake.result or {}


def next_fence(using: str) -> int:
    """Take the next fencing token: call it only after the rows being claimed are locked.

    Taken after the locks, it is larger than the token of any earlier claim of those wakes and of
    their lanes (those claims committed before these locks could be had).
    """
    fence: int = Fence.objects.using(using).create().pk
    return fence


def renew_leases(claims: Iterable[Claim], lease: timedelta) -> set[int]:
    """Extend the leases of the claims still held under their tokens; return the ids still held.

    The heartbeat of a runner. A claim another runner took over (its token changed) is not touched,
    and its id is missing from the result: the runner must not start its sink.
    """
    now = clock.now()
    by_token: dict[str, list[int]] = {}
    for claim in claims:
        by_token.setdefault(claim.token, []).append(claim.wake.pk)
    rows = Wake.objects.using(db_alias())
    held: set[int] = set()
    for token, ids in by_token.items():
        mine = rows.filter(pk__in=ids, state=State.FIRING, claim_token=token)
        if mine.update(lease_until=now + lease) == len(ids):
            held.update(ids)
        else:
            held.update(mine.values_list("pk", flat=True))
    return held
