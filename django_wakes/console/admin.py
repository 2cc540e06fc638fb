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

import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.timesince import timesince
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import clock, engine
from ..exceptions import WakeError
from ..models import PausedLane, Receipt, RetainedEvent, Runner, SessionControl, State, Wake, WakeAttempt
from ..querysets import RunnerQuerySet, WakeQuerySet
from ..sinks import registry
from . import reads
from .attention import Attention, seconds
from .display import (
    chain_link,
    describe_trigger,
    error_details,
    holder_note,
    moment,
    pretty_json,
    runner_link,
    shorten,
    task_call,
    wake_link,
    why,
)
from .forms import MomentForm, PauseLaneForm
from .lanes import LaneQueue, busy_lanes, lane_queue, waiting_lanes

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # django-stubs makes the admin classes generic; at run time they are not subscriptable.
    ModelAdmin = admin.ModelAdmin[Any]
    AttemptInline = admin.TabularInline[WakeAttempt, Wake]
else:
    ModelAdmin = admin.ModelAdmin
    AttemptInline = admin.TabularInline

#: The wake page's Recurrence fields: shown for a recurring wake or a chain's occurrence only.
RECURRENCE_FIELDS = ("chain", "occurrence", "cron", "every", "tz", "catch_up", "start_at_s", "end_at_s")
#: A task's call and output are sent at most this long (the list shows one line of them, the rest on hover).
CALL_CHARS = 200
#: The wake list counts its matches up to this many and says "more than" beyond (COUNT(*) of 1M rows is not free).
COUNT_CAP = 10_000


#: The page being rendered's one look at the wakes (list columns get no request to carry it).
_ATTENTION: ContextVar[Attention | None] = ContextVar("django_wakes_admin_attention", default=None)


def _current_attention() -> Attention:
    """The :class:`Attention` of the page being rendered, or a fresh one outside a page."""
    return _ATTENTION.get() or Attention()


def _rendered_with_attention(view: Callable[[], HttpResponse]) -> HttpResponse:
    """Run and render a page while one :class:`Attention` answers "hung?" and "unwakeable?" for all its rows."""
    token = _ATTENTION.set(Attention())
    try:
        response = view()
        if isinstance(response, TemplateResponse):
            response.render()
        return response
    finally:
        _ATTENTION.reset(token)


class AttentionFilter(admin.SimpleListFilter):
    """The questions an operator on call asks first; "dead letter" is ``state = dead``."""

    title = _("needs attention")
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, StrOrPromise]]:
        return [
            ("dead", _("dead letter (failed every attempt)")),
            ("overdue", _("overdue (pending, due over a minute ago)")),
            ("hung", _("hung (firing longer than its lease or its kind's usual time)")),
            ("unwakeable", _("unwakeable (due, no live runner fires its kind)")),
            ("lapsed", _("lease lapsed (firing, runner gone)")),
            ("failing", _("failing (pending, last attempt failed)")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Wake]) -> QuerySet[Wake] | None:
        wakes = cast(WakeQuerySet, queryset)
        now = clock.now()
        if self.value() == "dead":
            return wakes.filter(state=State.DEAD)
        if self.value() == "overdue":
            return wakes.overdue(now)
        if self.value() == "hung":
            return Attention(now).hung(wakes)
        if self.value() == "unwakeable":
            return Attention(now).unwakeable(wakes)
        if self.value() == "lapsed":
            return wakes.lapsed(now)
        if self.value() == "failing":
            return wakes.failing()
        return None


class KindFilter(admin.SimpleListFilter):
    """Kinds to filter by, from the sink registries (this process's and the live runners'), not the table.

    Django's own field filter asks ``SELECT DISTINCT kind`` of the whole table on every list view.
    A kind nobody registers is still reachable by search (its prefix) or ``?kind=...``.
    """

    title = _("kind")
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, StrOrPromise]]:
        kinds = set(registry.kinds()) | set(Attention().fireable_kinds)
        chosen = self.value()
        if chosen:
            kinds.add(chosen)
        return [(kind, kind) for kind in sorted(kinds)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Wake]) -> QuerySet[Wake] | None:
        return queryset.filter(kind=self.value()) if self.value() else None


class CappedPaginator(Paginator):  # type: ignore[type-arg]  # generic in django-stubs only
    """Counts matches only up to :data:`COUNT_CAP` (a bounded query), so a list view never counts a million rows."""

    @cached_property
    def count(self) -> int:
        rows = cast(QuerySet[Wake], self.object_list)
        return rows.order_by()[: COUNT_CAP + 1].count()


class WakeAttemptInline(AttemptInline):
    model = WakeAttempt
    extra = 0
    can_delete = False
    show_change_link = False
    verbose_name_plural = _("attempt history")
    fields = ("number", "outcome", "runner", "fence", "started", "took", "error_type", "error_details")
    readonly_fields = fields
    ordering = ("number", "id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("runner"))
    def runner(self, attempt: WakeAttempt) -> str:
        return runner_link(attempt.runner_id)

    @admin.display(description=_("started"))
    def started(self, attempt: WakeAttempt) -> str:
        return moment(attempt.started_at)

    @admin.display(description=_("took"))
    def took(self, attempt: WakeAttempt) -> str:
        if attempt.finished_at is None:
            return "-"
        return seconds(attempt.finished_at - attempt.started_at)

    @admin.display(description=_("error"))
    def error_details(self, attempt: WakeAttempt) -> str:
        return error_details(attempt.error)


class ReadOnlyAdmin(ModelAdmin):
    """Viewable, never added, edited or deleted here: rows change only through the engine."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # inspect-only: no Save buttons, POST refused; operator actions ask "operate"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _time_field(name: str, label: StrOrPromise) -> Callable[[Any, Wake], str]:
    """A read-only display of one time field of a wake, to the second (Django's own stops at the minute)."""

    @admin.display(description=label, ordering=name)
    def show(self: Any, wake: Wake) -> str:
        return moment(getattr(wake, name), zone=True)

    return show


@dataclass(frozen=True)
class Operation:
    """A button on the wake page: what it is called, what it asks for, and the transition it runs."""

    label: StrOrPromise
    confirm: StrOrPromise
    applies: Callable[[Wake], bool]
    asks_for_time: StrOrPromise | None = None


OPERATIONS: dict[str, Operation] = {
    "fire_now": Operation(
        _("Fire now"),
        _("Make this wake due now: the next runner pass fires it (its lane's order still holds)."),
        lambda w: w.state == State.PENDING and w.fire_at is not None,
    ),
    "reschedule": Operation(
        _("Reschedule"),
        _("Move when this wake is next due."),
        lambda w: w.state == State.PENDING and w.fire_at is not None and not (w.is_recurring and w.result is None),
        asks_for_time=_("New time"),
    ),
    "extend_expiry": Operation(
        _("Extend expiry"),
        _("Give this wake more time for its trigger to come."),
        lambda w: w.state == State.PENDING and w.expires_at is not None and w.result is None,
        asks_for_time=_("New expiry"),
    ),
    "retry": Operation(
        _("Retry"),
        _("Requeue this dead wake with fresh attempts, due now; its saved result is handed to the sink again."),
        lambda w: w.state == State.DEAD,
    ),
    "cancel": Operation(
        _("Cancel"),
        _("Cancel this wake: it will never fire (a firing recurring occurrence finishes, and its chain ends)."),
        lambda w: w.state == State.PENDING or (w.state == State.FIRING and w.is_recurring),
    ),
}


def _run_operation(name: str, wake_id: int, at: datetime | None) -> str:
    """Run one of :data:`OPERATIONS` through the engine; return its message (it raises OperationRefused)."""
    if name == "fire_now":
        return engine.fire_now(wake_id)
    if name == "reschedule":
        assert at is not None
        return engine.reschedule(wake_id, at)
    if name == "extend_expiry":
        assert at is not None
        return engine.extend_expiry(wake_id, at)
    if name == "retry":
        return engine.retry_wake(wake_id)
    return engine.cancel_wake(wake_id)


class OperatorMixin(ModelAdmin):
    """The operator check shared by the wake page, its buttons, its bulk actions and the lanes page."""

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Whether the user may run engine transitions here: ``operate_wake`` on top of the view permission.

        Operating without viewing is refused like every other console page (list, wake page, lanes,
        chains): a user with ``operate_wake`` alone neither reads a wake through its confirmation page
        nor changes a wake the console would not show them.
        """
        return self.has_view_permission(request) and request.user.has_perm("django_wakes.operate_wake")


@admin.register(Wake)
class WakeAdmin(OperatorMixin, ReadOnlyAdmin):
    list_display = (
        "id",
        "what",
        "trigger",
        "state",
        "lane",
        "workspace",
        "when",
        "attempts_of_max",
        "why",
    )
    list_display_links = ("id",)
    # No filter here may scan the table to list its choices (Django's field filter on kind or queue would).
    list_filter = (AttentionFilter, "state", "trigger_type", KindFilter)
    # Prefix matches, case-sensitive: `LIKE 'term%'` can use an index; `icontains` scans the whole table.
    search_fields = (
        "kind__startswith",
        "workspace_id__startswith",
        "session_id__startswith",
        "serial_key__startswith",
        "event_key__startswith",
        "idempotency_key__exact",
        "chain_id__exact",
    )
    search_help_text = _(
        "A wake id, or the start of a kind, workspace, session, lane or event key (case-sensitive); "
        "an exact idempotency key or chain id."
    )
    # No date_hierarchy: its drill-down reads every row's created_at (0.8 s at a million rows on PostgreSQL).
    ordering = ("-id",)
    show_full_result_count = False  # a COUNT(*) over a large table on every page view is not free
    paginator = CappedPaginator
    list_per_page = 50
    inlines = (WakeAttemptInline,)
    actions = ("cancel_pending", "retry_dead")
    change_list_template = "admin/django_wakes/wake/change_list.html"
    change_form_template = "admin/django_wakes/wake/change_form.html"
    # token_hash, claim_token and coalesce_key are deliberately absent.
    fieldsets = (
        (None, {"fields": ("id", "state", "why_now", "trigger", "what_it_does", "in_flight")}),
        (_("Identity"), {"fields": ("kind", "workspace_id", "session_id", "lane", "queue_name", "priority")}),
        (
            _("Timing"),
            {"fields": ("created", "fire_at_s", "due_at_s", "expires_at_s", "claimed_at_s", "settled_at_s", "updated")},
        ),
        (
            _("Trigger"),
            {"fields": ("event_key", "watched_keys_list", "event_match", "prompt", "on_expiry", "idempotency_key")},
        ),
        (_("Payload"), {"fields": ("intent_json", "result_json", "output_json", "scratch_json", "depth")}),
        (
            _("Firing"),
            {
                "fields": (
                    "attempts",
                    "max_attempts",
                    "claimed_by_link",
                    "lease_until_s",
                    "lane_lock",
                    "fence",
                    "start_guard",
                    "sink_started_at_s",
                    "last_error_details",
                )
            },
        ),
        (
            _("Recurrence"),
            {
                "classes": ("collapse",),
                "fields": RECURRENCE_FIELDS,
            },
        ),
    )
    readonly_fields = tuple(str(field) for _title, options in fieldsets for field in options["fields"])
    #: Shown on every wake's page; any other field is left out while it is empty, or at a default that says nothing.
    always_shown = frozenset(
        {"id", "state", "trigger", "kind", "workspace_id", "queue_name", "attempts", "max_attempts"}
    )
    #: Defaults that say nothing: priority 0, created by no sink (depth 0), never claimed (fence 0).
    silent_defaults: dict[str, object] = {"priority": 0, "depth": 0, "fence": 0}

    created = _time_field("created_at", _("created"))
    fire_at_s = _time_field("fire_at", _("fire at"))
    due_at_s = _time_field("due_at", _("due at"))
    expires_at_s = _time_field("expires_at", _("expires at"))
    claimed_at_s = _time_field("claimed_at", _("claimed"))
    settled_at_s = _time_field("settled_at", _("settled"))
    updated = _time_field("updated_at", _("updated"))
    lease_until_s = _time_field("lease_until", _("lease until"))
    sink_started_at_s = _time_field("sink_started_at", _("sink started"))
    start_at_s = _time_field("start_at", _("chain starts"))
    end_at_s = _time_field("end_at", _("chain ends"))

    def get_fieldsets(self, request: HttpRequest, obj: Wake | None = None) -> Any:
        """The wake page's fields, without those that are empty for this wake (a dead wake's page was ~25 dashes).

        The attempt history comes right after the first fieldset (the template puts it there).
        """
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        shown = []
        for title, options in fieldsets:
            fields = [name for name in options["fields"] if self._worth_showing(obj, str(name))]
            if fields:
                shown.append((title, {**options, "fields": fields}))
        return shown

    def _worth_showing(self, wake: Wake, name: str) -> bool:
        if name in self.always_shown:
            return True
        if name in RECURRENCE_FIELDS and not (wake.chain_id or wake.is_recurring):
            return False  # catch-up and occurrence have defaults even on a one-off wake
        display = getattr(self, name, None)
        if callable(display):
            return str(display(wake)) not in ("", "-")
        value = getattr(wake, name)
        if name in self.silent_defaults:
            return bool(value != self.silent_defaults[name])
        return value not in (None, "", [], {})

    # -- pages ---------------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        """The wake pages plus the dashboard (``admin:django_wakes_dashboard``), lanes and the wake buttons."""
        wrap = self.admin_site.admin_view
        dashboard = path("dashboard/", wrap(self.dashboard_view), name="django_wakes_dashboard")
        lanes = path("lanes/", wrap(self.lanes_view), name="django_wakes_lanes")
        operate = path(
            "<path:object_id>/operate/<str:operation>/", wrap(self.operate_view), name="django_wakes_wake_operate"
        )
        from .chains import chain_urls  # the chain page (admin:django_wakes_chain): its own module

        return [dashboard, lanes, operate, *chain_urls(self), *super().get_urls()]

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

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, rendered while one :class:`Attention` answers "hung?" and "unwakeable?" for all its rows."""
        context = {
            **(extra_context or {}),
            "operator_zone": timezone.get_current_timezone_name(),
            "count_cap": COUNT_CAP,
            "read_lag": reads.replica_lag() if reads.for_listing(request) else None,
        }
        return _rendered_with_attention(lambda: super(WakeAdmin, self).changelist_view(request, context))

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The list's page of wakes, whose lanes' holders are then read in one query (for "why")."""
        changelist = super().get_changelist_instance(request)
        _current_attention().know_lanes(list(changelist.result_list))
        return changelist

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The wake page, with the operator's buttons for what applies to the wake now."""
        buttons: list[tuple[str, StrOrPromise]] = []
        wake = self.get_object(request, object_id)
        if wake is not None and self.has_operate_permission(request):
            buttons = [
                (reverse("admin:django_wakes_wake_operate", args=[quote(wake.pk), name]), op.label)
                for name, op in OPERATIONS.items()
                if op.applies(wake)
            ]
        context = {**(extra_context or {}), "operations": buttons}
        return _rendered_with_attention(
            lambda: super(WakeAdmin, self).change_view(request, object_id, form_url, context)
        )

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """GET: confirm one operation on one wake. POST: run it through the engine, say what happened.

        403 without the view permission or without ``operate_wake`` (:meth:`has_operate_permission`).
        """
        if not self.has_operate_permission(request):
            raise PermissionDenied
        op = OPERATIONS.get(operation)
        wake = self.get_object(request, object_id)
        if op is None or wake is None:
            raise Http404(_("No such wake or operation."))
        change_url = reverse("admin:django_wakes_wake_change", args=[quote(wake.pk)])
        form = MomentForm(request.POST or None, label=op.asks_for_time) if op.asks_for_time else None
        if request.method == "POST" and (form is None or form.is_valid()):
            at = form.cleaned_data["at"] if form is not None else None
            try:
                message = _run_operation(operation, wake.pk, at)
            except WakeError as exc:
                self.message_user(request, _("Not done: %(why)s.") % {"why": exc}, messages.ERROR)
            else:
                self.log_change(request, wake, f"{op.label}: {message}")
                self.message_user(request, message, messages.SUCCESS)
            return HttpResponseRedirect(change_url)
        context = {
            **self.admin_site.each_context(request),
            "title": _("%(operation)s wake %(id)s?") % {"operation": op.label, "id": wake.pk},
            "opts": self.opts,
            "original": wake,
            "operation": op,
            "form": form,
            "change_url": change_url,
            "operator_zone": timezone.get_current_timezone_name(),
            "summary": [
                (_("kind"), wake.kind),
                (_("state"), wake.get_state_display()),
                (_("trigger"), describe_trigger(wake)),
                (_("due at"), moment(wake.due_at, zone=True)),
                (_("expires at"), moment(wake.expires_at, zone=True)),
                (_("lane"), wake.serial_key or "-"),
            ],
        }
        return TemplateResponse(request, "admin/django_wakes/wake/operate_confirm.html", context)

    def lanes_view(self, request: HttpRequest) -> HttpResponse:
        """Busy and waiting lanes, one lane's queue (``?lane=<key>``), and pause/resume (POST, operators only)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        operator = self.has_operate_permission(request)
        if request.method == "POST":
            if not operator:
                raise PermissionDenied
            return self._pause_or_resume(request)
        lane = request.GET.get("lane")
        queue: LaneQueue | None = None
        if lane:
            queue = lane_queue(lane)
        busy = busy_lanes() if queue is None else []
        attention = Attention()
        for held in [*busy, *([queue] if queue is not None else [])]:
            if held.holder is not None:
                held.holder_note = holder_note(held.holder, attention)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Lanes") if queue is None else _("Lane %(lane)s") % {"lane": lane},
            "opts": self.opts,
            "operator": operator,
            "lane": queue,
            "busy": busy,
            "waiting": waiting_lanes() if queue is None else [],
            "paused": list(PausedLane.objects.order_by("-paused_at")[:100]) if queue is None else [],
            "pause_form": PauseLaneForm(initial={"lane": lane}) if queue is not None and not queue.paused else None,
            "moment": moment,
        }
        return TemplateResponse(request, "admin/django_wakes/wake/lanes.html", context)

    def _pause_or_resume(self, request: HttpRequest) -> HttpResponse:
        form = PauseLaneForm(request.POST)
        back = reverse("admin:django_wakes_lanes")
        if not form.is_valid():
            self.message_user(request, _("Not done: %(why)s") % {"why": form.errors.as_text()}, messages.ERROR)
            return HttpResponseRedirect(back)
        lane = form.cleaned_data["lane"]
        back += "?" + form.lane_query()
        user = request.user.get_username()
        try:
            if request.POST.get("do") == "resume":
                done = engine.resume_lane(lane)
                text = (
                    _("Lane %(lane)s resumed: its next wake is claimable now.")
                    if done
                    else _("Lane %(lane)s was not paused.")
                )
            else:
                done = engine.pause_lane(lane, by=user, reason=form.cleaned_data["reason"])
                text = (
                    _("Lane %(lane)s paused: no further wake of it is claimed until resumed.")
                    if done
                    else _("Lane %(lane)s was already paused.")
                )
        except WakeError as exc:
            self.message_user(request, _("Not done: %(why)s.") % {"why": exc}, messages.ERROR)
            return HttpResponseRedirect(back)
        self.message_user(request, text % {"lane": lane}, messages.SUCCESS if done else messages.WARNING)
        return HttpResponseRedirect(back)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Wake], search_term: str
    ) -> tuple[QuerySet[Wake], bool]:
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term.isascii() and term.isdigit() and len(term) <= 18:  # fits a bigint
            results |= queryset.filter(pk=int(term))
        return results, may_have_duplicates

    # -- columns -------------------------------------------------------------------------------------

    @admin.display(description=_("what"), ordering="kind")
    def what(self, wake: Wake) -> str:
        """The kind, and for a task its call and output; the queue and priority when not the defaults."""
        extras = []
        if wake.queue_name != "default":
            extras.append(format_html('<span class="wake-badge">{}</span>', wake.queue_name))
        if wake.priority:
            extras.append(format_html('<span class="wake-badge">p{}</span>', wake.priority))
        call = task_call(wake)
        lines = [format_html("{} {}", shorten(wake.kind, 40), format_html_join(" ", "{}", ((e,) for e in extras)))]
        if call is not None:
            # One line each, cut with an ellipsis by the CSS (never broken mid-name), whole on hover.
            shown = Truncator(call).chars(CALL_CHARS)
            lines.append(format_html('<br><code class="wake-call" title="{}">{}</code>', call, shown))
            if wake.output is not None:
                output = json.dumps(wake.output, ensure_ascii=False)
                shown = Truncator(output).chars(CALL_CHARS)
                lines.append(format_html('<br><code class="wake-call" title="{}">→ {}</code>', output, shown))
        return format_html_join("", "{}", ((line,) for line in lines))

    @admin.display(description=_("trigger"))
    def trigger(self, wake: Wake) -> str:
        return describe_trigger(wake)

    @admin.display(description=_("lane"), ordering="serial_key")
    def lane(self, wake: Wake) -> str:
        if not wake.serial_key:
            return "-"
        url = reverse("admin:django_wakes_lanes") + "?" + PauseLaneForm.query_for(wake.serial_key)
        return format_html('<a href="{}">{}</a>', url, shorten(wake.serial_key))

    @admin.display(description=_("workspace"), ordering="workspace_id")
    def workspace(self, wake: Wake) -> str:
        return shorten(wake.workspace_id)

    @admin.display(description=_("due · claimed · settled"))
    def when(self, wake: Wake) -> str:
        """The moment that matters in this state: due (pending), claimed (firing), settled (ended).

        The state column says which, so the cell holds the time alone (one line at 1440 px).
        """
        if wake.state == State.PENDING:
            return moment(wake.due_at)
        if wake.state == State.FIRING:
            return moment(wake.claimed_at)
        return moment(wake.settled_at or wake.updated_at)

    @admin.display(description=_("attempts"), ordering="attempts")
    def attempts_of_max(self, wake: Wake) -> str:
        return f"{wake.attempts}/{wake.max_attempts}"

    @admin.display(description=_("why"))
    def why(self, wake: Wake) -> str:
        return why(wake, _current_attention())

    # -- the wake page -------------------------------------------------------------------------------

    @admin.display(description=_("why"))
    def why_now(self, wake: Wake) -> str:
        return why(wake, _current_attention()) or "-"

    @admin.display(description=_("what it does"))
    def what_it_does(self, wake: Wake) -> str:
        """A task's call (``module.fn(1, key=2)``); other wakes have their kind, shown below."""
        call = task_call(wake)
        if call is None:
            return "-"
        return format_html("<code>{}</code>", call)

    @admin.display(description=_("in flight"))
    def in_flight(self, wake: Wake) -> str:
        """The attempt under way (firing) or cut off (lease lapsed): not in the history until it settles."""
        if wake.state != State.FIRING:
            return "-"
        now = clock.now()
        lease = (
            format_html('<strong class="wake-lapsed">{} {}</strong>', _("lapsed"), moment(wake.lease_until))
            if wake.lease_until is not None and wake.lease_until <= now
            else format_html("{} {}", _("held until"), moment(wake.lease_until))
        )
        started = (
            format_html("{} {}", _("sink started"), moment(wake.sink_started_at))
            if wake.sink_started_at
            else _("sink start not recorded")
        )
        return format_html(
            "{} {} · {} {} {} {} · {} · {} {}",
            _("attempt"),
            wake.attempts,
            _("claimed by"),
            runner_link(wake.claimed_by),
            _("at"),
            moment(wake.claimed_at),
            started,
            _("lease"),
            lease,
        )

    @admin.display(description=_("start recorded"))
    def start_guard(self, wake: Wake) -> str:
        """Whether claims record their sink's start: the rare state after a runner died holding the wake."""
        if not wake.guarded:
            return "-"  # the usual state: left off the page
        return format_html(
            "{}",
            _(
                "yes: a runner died holding this wake, so each claim records when its sink starts (only an attempt "
                "whose sink really started is charged if a runner dies again)"
            ),
        )

    @admin.display(description=_("chain"))
    def chain(self, wake: Wake) -> str:
        return chain_link(wake, format_html("{}", wake.chain_id)) if wake.chain_id else "-"

    @admin.display(description=_("claimed by"))
    def claimed_by_link(self, wake: Wake) -> str:
        return runner_link(wake.claimed_by)

    @admin.display(description=_("any of these keys too"))
    def watched_keys_list(self, wake: Wake) -> str:
        keys = [w.event_key for w in wake.watched_keys.all()]
        return ", ".join(keys) if keys else "-"

    @admin.display(description=_("intent"))
    def intent_json(self, wake: Wake) -> str:
        return pretty_json(wake.intent)

    @admin.display(description=_("result"))
    def result_json(self, wake: Wake) -> str:
        return pretty_json(wake.result)

    @admin.display(description=_("output"))
    def output_json(self, wake: Wake) -> str:
        return pretty_json(wake.output)

    @admin.display(description=_("scratch"))
    def scratch_json(self, wake: Wake) -> str:
        return pretty_json(wake.scratch)

    @admin.display(description=_("last error"))
    def last_error_details(self, wake: Wake) -> str:
        return error_details(wake.last_error)

    # -- bulk actions --------------------------------------------------------------------------------

    @admin.action(description=_("Cancel selected pending wakes"), permissions=["operate"])
    def cancel_pending(self, request: HttpRequest, queryset: QuerySet[Wake]) -> None:
        done, skipped = self._apply(request, queryset, State.PENDING, engine.cancel, "Cancelled from the admin.")
        if done:
            self.message_user(
                request,
                ngettext("%(count)d wake was cancelled.", "%(count)d wakes were cancelled.", done) % {"count": done},
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected wake was skipped: only pending wakes can be cancelled.",
                    "%(count)d selected wakes were skipped: only pending wakes can be cancelled.",
                    skipped,
                )
                % {"count": skipped},
                messages.WARNING,
            )

    @admin.action(description=_("Retry selected dead wakes"), permissions=["operate"])
    def retry_dead(self, request: HttpRequest, queryset: QuerySet[Wake]) -> None:
        done, skipped = self._apply(request, queryset, State.DEAD, engine.requeue, "Requeued from the admin.")
        if done:
            self.message_user(
                request,
                ngettext(
                    "%(count)d dead wake was requeued to fire now.",
                    "%(count)d dead wakes were requeued to fire now.",
                    done,
                )
                % {"count": done},
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected wake was skipped: only dead wakes can be retried.",
                    "%(count)d selected wakes were skipped: only dead wakes can be retried.",
                    skipped,
                )
                % {"count": skipped},
                messages.WARNING,
            )

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[Wake], state: str, transition: Callable[[int], bool], note: str
    ) -> tuple[int, int]:
        """Run ``transition`` on each selected wake in ``state``; return (done, skipped).

        Wakes in another state, and any whose state changed under us (the transition lost its
        conditional UPDATE to a runner), count as skipped.
        """
        selected = queryset.count()
        done = 0
        for wake in queryset.filter(state=state).order_by("pk"):
            if transition(wake.pk):
                done += 1
                self.log_change(request, wake, note)
        return done, selected - done


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
