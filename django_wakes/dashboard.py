"""The operator dashboard: an admin page with the backlog at a glance (bounded, indexed queries only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from .models import Wake


def render_dashboard(request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> HttpResponse:
    """Render the dashboard inside the admin's frame (its header, breadcrumbs and permissions)."""
    by_state = dict(Wake.objects.values_list("state").annotate(n=Count("id")).order_by())
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Wakes dashboard"),
        "opts": model_admin.model._meta,
        "by_state": sorted(by_state.items()),
    }
    return TemplateResponse(request, "admin/django_wakes/dashboard.html", context)
