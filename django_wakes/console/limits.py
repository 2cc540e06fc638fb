"""The limits page (the lanes page's sibling) and what ``wakes status`` says about limits.

One row per limit in play: the key (or workspace), the limit as written, how many of its slots are in
use (firing now, or started within the period), how many of its wakes are due and waiting, and, when
it is full, until when. Read-only and bounded: the busy slots in one grouped read
(:func:`django_wakes.engine.limit_slots.usage`), at most :data:`ROWS_SHOWN` rows, each row's due
wakes counted up to :data:`COUNT_CAP` through ``wake_pending_limit_idx``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import clock
from ..engine import limit_rules, limit_slots
from ..engine.limit_rules import Limit
from ..models import State, Wake
from ..states import LimitScope
from . import reads
from .attention import seconds

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin

#: At most this many limits are listed.
ROWS_SHOWN = 100
#: A limit's due wakes are counted up to this many ("1000+" beyond).
COUNT_CAP = 1000


@dataclass(frozen=True)
class LimitRow:
    """One limit now: its slots in use, its due wakes waiting, and until when it holds them (when full)."""

    limit: Limit
    in_use: int
    waiting: int
    until: datetime | None

    @property
    def full(self) -> bool:
        return self.in_use >= self.limit.size

    @property
    def waiting_label(self) -> str:
        return f"{COUNT_CAP}+" if self.waiting > COUNT_CAP else str(self.waiting)

    @property
    def key(self) -> str:
        """The key as the page shows it (a workspace is marked so)."""
        return self.limit.name if self.limit.scope == LimitScope.KEY else f"workspace {self.limit.name}"

    def holds_until(self, now: datetime) -> str:
        """``""`` while a slot is free; else until when its wakes wait."""
        if not self.full:
            return ""
        return limit_slots.Hold(self.limit, self.in_use, self.until).later(until_text(self.until, now))


def until_text(until: datetime | None, now: datetime) -> str | None:
    """``2026-12-02 10:00:01 UTC (in 0.4s)`` in the operator's zone, or ``None``."""
    if until is None:
        return None
    local = timezone.localtime(until)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} (in {seconds(max(until - now, timedelta(0)))})"


def hold_text(hold: limit_slots.Hold, now: datetime) -> str:
    """Why a due wake waits, for the console's "why" and ``wakes status``."""
    return hold.text(until_text(hold.until, now))


def overview(now: datetime | None = None, using: str | None = None) -> list[LimitRow]:
    """The limits in play: every limit with a busy slot, and each key ``WAKES["LIMITS"]`` names exactly.

    Full ones first, then by slots in use. Empty while no limit is configured.
    """
    if not limit_rules.active():
        return []
    now = now or clock.now()
    using = using or reads.alias()
    rules = limit_rules.current()
    used = limit_slots.usage(using, now)
    limits: dict[tuple[str, str, str], Limit] = {}
    for scope, name, kind in used:
        for limit in rules.key_limits(name) if scope == LimitScope.KEY else rules.workspace_limits(name):
            if limit.kind == kind:
                limits[limit.bucket] = limit
    for name in rules.exact:
        for limit in rules.key_limits(name):
            limits.setdefault(limit.bucket, limit)
    due = Wake.objects.using(using).filter(state=State.PENDING, due_at__lte=now)
    rows = []
    for bucket, limit in list(limits.items())[: ROWS_SHOWN * 2]:
        mine = (
            due.filter(limit_key=limit.name) if limit.scope == LimitScope.KEY else due.filter(workspace_id=limit.name)
        )
        usage = used.get(bucket)
        rows.append(
            LimitRow(
                limit,
                usage.in_use if usage else 0,
                mine.order_by()[: COUNT_CAP + 1].count(),
                usage.until if usage else None,
            )
        )
    rows.sort(key=lambda row: (not row.full, -row.in_use, row.limit.scope, row.limit.name, row.limit.kind))
    return rows[:ROWS_SHOWN]


def limit_urls(model_admin: ModelAdmin) -> list[URLPattern]:
    """The limits page's URL (``admin:django_wakes_limits``), for the wake admin's ``get_urls``."""
    view = model_admin.admin_site.admin_view(partial(limits_view, model_admin=model_admin))
    return [path("limits/", view, name="django_wakes_limits")]


def limits_view(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    """Every limit in play: key, limit, in use, due wakes waiting, and until when a full one holds them."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    now = clock.now()
    rows = overview(now)
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": _("Limits"),
        "opts": model_admin.model._meta,
        "rows": [(row, row.holds_until(now)) for row in rows],
        "configured": limit_rules.active(),
    }
    return TemplateResponse(request, "admin/django_wakes/wake/limits.html", context)
