"""Backlog and lateness per workspace, bounded: the dashboard's workspace table and the metrics' workspace gauges.

With fair share (:mod:`django_wakes.engine.fairness`) one workspace's backlog no longer holds the others
back; an operator still wants to see whose backlog it is and whether any workspace is late. A host may
have 10,000 workspaces, so only the :data:`WORKSPACE_ROWS` with the most due wakes are itemised and the
rest are summed under :data:`OTHER_WORKSPACES` (for Prometheus: a label set that stays bounded).

Four queries, each bounded as :mod:`.stats` explains: three over the pending rows (the top workspaces,
the totals, the oldest due wake of the rest: their cost follows the backlog, not the history) and one
over the wakes settled in the last hour (a range scan of the terminal rows by ``updated_at``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum

from ..models import Wake
from ..querysets import OVERDUE_AFTER
from ..states import State
from . import reads
from .stats import HOUR, SETTLED_BY_SINK, _seconds

#: At most this many workspaces are itemised (by due wakes, then pending); the rest are one row.
WORKSPACE_ROWS = 20
#: The row (and the metrics' ``workspace`` label) of the workspaces past :data:`WORKSPACE_ROWS`.
OTHER_WORKSPACES = "(other workspaces)"


@dataclass(frozen=True)
class WorkspaceBacklog:
    """One workspace's pending wakes now, and the lateness of those fired in the last hour."""

    workspace_id: str
    pending: int = 0
    due: int = 0  # pending, due now (overdue ones included)
    overdue: int = 0
    oldest_due: datetime | None = None  # the earliest due time among its due wakes
    fired_hour: int = 0  # fired (or expired) in the last hour
    lateness_hour_seconds: float = 0.0  # their due-to-start lateness, summed

    def waited(self, now: datetime) -> float:
        """How long its oldest due wake has been due (0 when none is): the lateness it has now."""
        return max((now - self.oldest_due).total_seconds(), 0.0) if self.oldest_due else 0.0

    @property
    def mean_lateness_hour(self) -> float | None:
        return self.lateness_hour_seconds / self.fired_hour if self.fired_hour else None


def by_workspace(now: datetime, rows: int = WORKSPACE_ROWS) -> list[WorkspaceBacklog]:
    """The ``rows`` workspaces with the most due wakes (then pending), then one row for all the others."""
    using = reads.alias()
    pending = Wake.objects.using(using).filter(state=State.PENDING)
    counts = {
        "pending": Count("id"),
        "due": Count("id", filter=Q(due_at__lte=now)),
        "overdue": Count("id", filter=Q(due_at__lt=now - OVERDUE_AFTER)),
        "oldest_due": Min("due_at", filter=Q(due_at__lte=now)),
    }
    top = [
        WorkspaceBacklog(workspace_id, pending=n, due=due, overdue=overdue, oldest_due=oldest)
        for workspace_id, n, due, overdue, oldest in pending.values_list("workspace_id")
        .annotate(**counts)
        .order_by(F("due").desc(), F("pending").desc(), "workspace_id")[:rows]
    ]
    names = [w.workspace_id for w in top]
    totals = pending.aggregate(**counts)
    late = _lateness_by_workspace(now - HOUR, names)
    top = [replace(w, **late.get(w.workspace_id, {})) for w in top]
    rest = WorkspaceBacklog(
        OTHER_WORKSPACES,
        pending=totals["pending"] - sum(w.pending for w in top),
        due=totals["due"] - sum(w.due for w in top),
        overdue=totals["overdue"] - sum(w.overdue for w in top),
        **late.get(OTHER_WORKSPACES, {}),
    )
    if rest.due:
        rest = replace(
            rest,
            oldest_due=pending.filter(due_at__lte=now)
            .exclude(workspace_id__in=names)
            .aggregate(oldest=Min("due_at"))["oldest"],
        )
    if rest.pending or rest.fired_hour:
        top.append(rest)
    return top


def _lateness_by_workspace(since: datetime, names: list[str]) -> dict[str, dict[str, Any]]:
    """Wakes a sink settled since ``since`` and their summed lateness: per named workspace, and the rest."""
    late = ExpressionWrapper(F("claimed_at") - F("due_at"), output_field=DurationField())
    settled = Wake.objects.using(reads.alias()).filter(
        state__in=SETTLED_BY_SINK, updated_at__gte=since, due_at__isnull=False, claimed_at__isnull=False
    )
    found: dict[str, dict[str, Any]] = {}
    for workspace_id, fired, total in (
        settled.filter(workspace_id__in=names)
        .values_list("workspace_id")
        .annotate(n=Count("id"), s=Sum(late))
        .order_by()
    ):
        found[workspace_id] = {"fired_hour": fired, "lateness_hour_seconds": _seconds(total)}
    rest = settled.exclude(workspace_id__in=names).aggregate(n=Count("id"), s=Sum(late))
    if rest["n"]:
        found[OTHER_WORKSPACES] = {"fired_hour": rest["n"], "lateness_hour_seconds": _seconds(rest["s"])}
    return found
