"""The operator console: what is stuck, why, and what comes next; per-wake and per-lane operator buttons.

Rows are never edited here. Every write is an engine transition: the list's bulk actions
(:func:`~django_wakes.engine.cancel`, :func:`~django_wakes.engine.requeue`), the wake page's buttons
and the lanes page's pause/resume (:mod:`django_wakes.engine.operate`), each a conditional UPDATE, so
an operator racing a runner can never double-fire or resurrect a wake. They need the
``django_wakes.operate_wake`` permission on top of the view permission every page asks for (403
without either) and a confirmation (a GET shows what will happen, the POST does it). Secrets stay
hidden: the approval ``token_hash``, the claim token and a receipt's owner token are never shown.

Times are shown to the second in the operator's time zone (Django's current time zone, else
``TIME_ZONE``), with UTC on hover.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince
from django.utils.translation import gettext_lazy as _

from .. import clock
from ..models import Receipt, RetainedEvent, Runner, SessionControl, State, Wake
from ..querysets import RunnerQuerySet
from . import reads
from .display import moment, pretty_json, wake_link
from .lane_page import LanesPage
from .operations import WakeOperations
from .wake_list import WakeList
from .wake_page import WakePage

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # django-stubs makes the admin classes generic; at run time they are not subscriptable.
    ModelAdmin = admin.ModelAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(ModelAdmin):
    """Viewable, never added, edited or deleted here: rows change only through the engine."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # inspect-only: no Save buttons, POST refused; operator actions ask "operate"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Wake)
class WakeAdmin(WakeList, WakePage, WakeOperations, LanesPage, ReadOnlyAdmin):
    """The wake list (:mod:`.wake_list`), the wake page (:mod:`.wake_page`), its buttons and bulk actions
    (:mod:`.operations`), the lanes page (:mod:`.lane_page`), the dashboard and the chain page."""

    def get_urls(self) -> list[URLPattern]:
        """The wake pages plus the dashboard (``admin:django_wakes_dashboard``), lanes and the wake buttons."""
        wrap = self.admin_site.admin_view
        dashboard = path("dashboard/", wrap(self.dashboard_view), name="django_wakes_dashboard")
        lanes = path("lanes/", wrap(self.lanes_view), name="django_wakes_lanes")
        operate = path(
            "<path:object_id>/operate/<str:operation>/", wrap(self.operate_view), name="django_wakes_wake_operate"
        )
        from .chains import chain_urls  # the chain page (admin:django_wakes_chain): its own module
        from .limits import limit_urls  # the limits page (admin:django_wakes_limits): its own module

        return [dashboard, lanes, operate, *chain_urls(self), *limit_urls(self), *super().get_urls()]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Wake]:
        """The wake list, when read (GET), comes from ``WAKES["READ_DATABASE"]``; everything else from the primary.

        An action posted from the list (cancel, retry) reads its selection from the primary too, and
        runs through the engine there.
        """
        rows = super().get_queryset(request)
        return rows.using(reads.alias()) if reads.for_listing(request) else rows

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        from .dashboard import render_dashboard  # the dashboard's own module: queries, charts, template

        return render_dashboard(request, self)


@admin.register(RetainedEvent)
class RetainedEventAdmin(ReadOnlyAdmin):
    """Events kept for watches created later (``deliver_event(retain=...)``, ``watch(since=...)``)."""

    list_display = ("id", "workspace_id", "event_key", "delivered_at", "expires_at")
    search_fields = ("workspace_id__startswith", "event_key__startswith")
    search_help_text = _("Workspace or event key, by prefix.")
    ordering = ("-delivered_at", "-id")
    show_full_result_count = False
    fields = ("workspace_id", "event_key", "payload_json", "delivered_at", "expires_at")
    readonly_fields = fields

    @admin.display(description=_("payload"))
    def payload_json(self, event: RetainedEvent) -> str:
        return pretty_json(event.payload)


@admin.register(SessionControl)
class SessionControlAdmin(ReadOnlyAdmin):
    """Sessions the engine keeps state for: stopped ones (``stop_session``) and agent budgets' last use."""

    list_display = ("workspace_id", "session_id", "stopped_at", "stop_reason", "last_agent_wake_at")
    list_filter = (("stopped_at", admin.EmptyFieldListFilter),)
    search_fields = ("session_id__startswith", "workspace_id__startswith")
    search_help_text = _("Session or workspace, by prefix.")
    ordering = ("-updated_at",)
    show_full_result_count = False
    fields = ("workspace_id", "session_id", "stopped_at", "stop_reason", "last_agent_wake_at", "updated_at")
    readonly_fields = fields


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ("id", "workspace_id", "session_id", "key", "state", "created_at", "completed_at", "lease_until")
    list_filter = ("state",)
    search_fields = ("workspace_id__exact", "session_id__exact", "key__exact")
    search_help_text = _("Exact workspace, session or key.")
    ordering = ("-id",)
    show_full_result_count = False
    # owner (the fence token of the caller running fn) is deliberately absent.
    fields = ("workspace_id", "session_id", "key", "state", "result_json", "created_at", "lease_until", "completed_at")
    readonly_fields = fields

    @admin.display(description=_("result"))
    def result_json(self, receipt: Receipt) -> str:
        return pretty_json(receipt.result)


class LivenessFilter(admin.SimpleListFilter):
    title = _("liveness")
    parameter_name = "liveness"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, StrOrPromise]]:
        return [("live", _("live")), ("stale", _("stale"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Runner]) -> QuerySet[Runner] | None:
        runners = cast(RunnerQuerySet, queryset)
        if self.value() == "live":
            return runners.live()
        if self.value() == "stale":
            return runners.stale()
        return None


@admin.register(Runner)
class RunnerAdmin(ReadOnlyAdmin):
    list_display = ("id", "host", "pid", "started", "last_heartbeat", "liveness")
    list_filter = (LivenessFilter,)
    search_fields = ("id", "host")
    ordering = ("-heartbeat_at",)
    fields = ("id", "host", "pid", "started", "last_heartbeat", "liveness", "kinds_list", "in_hand")
    readonly_fields = fields

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, runner: Runner) -> str:
        return moment(runner.started_at, zone=True)

    @admin.display(description=_("last heartbeat"), ordering="heartbeat_at")
    def last_heartbeat(self, runner: Runner) -> str:
        return moment(runner.heartbeat_at, zone=True)

    @admin.display(description=_("kinds it fires"))
    def kinds_list(self, runner: Runner) -> str:
        if runner.kinds is None:
            return str(_("not recorded"))
        return ", ".join(runner.kinds) or "-"

    @admin.display(description=_("wakes in hand"))
    def in_hand(self, runner: Runner) -> str:
        """The wakes this runner holds now (bounded: a runner holds at most its batch)."""
        ids = list(
            Wake.objects.filter(state=State.FIRING, claimed_by=runner.pk)
            .order_by("id")
            .values_list("pk", flat=True)[:50]
        )
        return format_html_join(", ", "{}", ((wake_link(pk),) for pk in ids)) if ids else "-"

    @admin.display(description=_("liveness"))
    def liveness(self, runner: Runner) -> str:
        if runner.is_live:
            return format_html('<span style="color: green">{}</span>', _("live"))
        return format_html(
            '<span style="color: #b00">{}</span>',
            _("stale (last heartbeat %(span)s ago)") % {"span": timesince(runner.heartbeat_at, clock.now())},
        )
