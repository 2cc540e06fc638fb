"""Indexes of :class:`~django_wakes.models.Wake` defined beside the code that reads them (models.py stays short)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from .states import State

#: engine.fairness: the distinct workspaces of pending rows (one probe each), and one workspace's candidates
#: in claim order when a busy runner splits its batch between workspaces. It leads with state for
#: MySQL/MariaDB, which drop the condition (on PostgreSQL and SQLite the column is constant in it);
#: "priority IS NOT NULL" keeps the lane probes off it, as it does for ``wake_pending_order_idx``.
PENDING_BY_WORKSPACE = models.Index(
    fields=["state", "workspace_id", "-priority", "due_at", "id"],
    condition=Q(state=State.PENDING, priority__isnull=False),
    name="wake_pending_workspace_idx",
)
