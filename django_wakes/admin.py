"""The operator console: inspect wakes, their attempts, receipts and runners; cancel or retry wakes.

Everything is read-only. The only writes are two actions, and both go through the engine's
conditional transitions (:func:`~django_wakes.engine.cancel`, :func:`~django_wakes.engine.requeue`),
so an operator racing a runner can never double-fire or resurrect a wake. Secrets stay hidden:
the approval ``token_hash``, the claim fence token and a receipt's owner token are never shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.timesince import timesince
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from . import clock, engine
from .models import Receipt, RetainedEvent, Runner, SessionControl, State, Wake, WakeAttempt
from .querysets import RunnerQuerySet, WakeQuerySet

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # django-stubs makes the admin classes generic; at run time they are not subscriptable.
    ModelAdmin = admin.ModelAdmin[Any]
    AttemptInline = admin.TabularInline[WakeAttempt, Wake]
else:
    ModelAdmin = admin.ModelAdmin
    AttemptInline = admin.TabularInline

SUMMARY_CHARS = 80


def _pretty_json(value: Any) -> str:
    """Render a JSON value for reading: indented, escaped, in a ``<pre>``."""
    if value is None:
        return "-"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _last_line(text: str) -> str:
    """The line of an error worth reading first: a traceback's last line names the exception."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _error_details(text: str) -> str:
    """The last line of an error, expandable to the whole text."""
    if not text:
        return "-"
    summary = Truncator(_last_line(text)).chars(SUMMARY_CHARS)
    return format_html("<details><summary>{}</summary><pre>{}</pre></details>", summary, text)


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():.1f}s"


class AttentionFilter(admin.SimpleListFilter):
    """The questions an operator on call asks first; "dead letter" is ``state = dead``."""

    title = _("needs attention")
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, StrOrPromise]]:
        return [
            ("dead", _("dead letter (failed every attempt)")),
            ("overdue", _("overdue (pending, due over a minute ago)")),
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
        if self.value() == "lapsed":
            return wakes.lapsed(now)
        if self.value() == "failing":
            return wakes.failing()
        return None


class WakeAttemptInline(AttemptInline):
    model = WakeAttempt
    extra = 0
    can_delete = False
    show_change_link = False
    fields = ("number", "outcome", "runner_id", "started_at", "finished_at", "duration", "error_details")
    readonly_fields = fields
    ordering = ("number", "id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("took"))
    def duration(self, attempt: WakeAttempt) -> str:
        if attempt.finished_at is None:
            return "-"
        return _seconds(attempt.finished_at - attempt.started_at)

    @admin.display(description=_("error"))
    def error_details(self, attempt: WakeAttempt) -> str:
        return _error_details(attempt.error)


class ReadOnlyAdmin(ModelAdmin):
    """Viewable, never added, edited or deleted here: rows change only through the engine."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # inspect-only: no Save buttons, POST refused; operator actions ask "operate"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Wake)
class WakeAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "kind",
        "trigger_type",
        "state",
        "serial_key",
        "workspace_id",
        "due_at",
        "fire_at",
        "attempts_of_max",
        "note",
    )
    list_filter = (AttentionFilter, "state", "trigger_type", "kind")
    # Exact matches only: they use the indexes; icontains would scan the whole table.
    search_fields = (
        "workspace_id__exact",
        "session_id__exact",
        "serial_key__exact",
        "event_key__exact",
        "idempotency_key__exact",
        "chain_id__exact",
    )
    search_help_text = _("Exact wake id, workspace, session, lane, event key, idempotency key or chain.")
    date_hierarchy = "created_at"
    ordering = ("-id",)
    show_full_result_count = False  # a COUNT(*) over a large table on every page view is not free
    list_per_page = 50
    inlines = (WakeAttemptInline,)
    actions = ("cancel_pending", "retry_dead")
    # token_hash, claim_token and coalesce_key are deliberately absent.
    fieldsets = (
        (None, {"fields": ("id", "kind", "trigger_type", "state", "workspace_id", "session_id", "serial_key")}),
        (
            _("Timing"),
            {"fields": ("created_at", "fire_at", "due_at", "expires_at", "claimed_at", "settled_at", "updated_at")},
        ),
        (
            _("Trigger"),
            {"fields": ("event_key", "watched_keys_list", "event_match", "prompt", "on_expiry", "idempotency_key")},
        ),
        (_("Payload"), {"fields": ("intent_json", "result_json", "scratch_json", "depth")}),
        (
            _("Firing"),
            {
                "fields": (
                    "attempts",
                    "max_attempts",
                    "claimed_by",
                    "lease_until",
                    "lane_lock",
                    "fence",
                    "guarded",
                    "sink_started_at",
                    "last_error_details",
                )
            },
        ),
        (
            _("Recurrence"),
            {
                "classes": ("collapse",),
                "fields": ("chain_id", "occurrence", "cron", "every", "tz", "catch_up", "start_at", "end_at"),
            },
        ),
    )
    readonly_fields = tuple(str(field) for _title, options in fieldsets for field in options["fields"])

    def get_urls(self) -> list[URLPattern]:
        """The wake pages plus the operator dashboard (``admin:django_wakes_dashboard``)."""
        dashboard = path("dashboard/", self.admin_site.admin_view(self.dashboard_view), name="django_wakes_dashboard")
        return [dashboard, *super().get_urls()]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        from .dashboard import render_dashboard  # the dashboard's own module: queries, charts, template

        return render_dashboard(request, self)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Wake], search_term: str
    ) -> tuple[QuerySet[Wake], bool]:
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term.isascii() and term.isdigit() and len(term) <= 18:  # fits a bigint
            results |= queryset.filter(pk=int(term))
        return results, may_have_duplicates

    @admin.display(description=_("attempts"), ordering="attempts")
    def attempts_of_max(self, wake: Wake) -> str:
        return f"{wake.attempts}/{wake.max_attempts}"

    @admin.display(description=_("note"))
    def note(self, wake: Wake) -> str:
        """The last error if there is one, else how late the wake is (or was) running."""
        if wake.last_error:
            line = _last_line(wake.last_error)
            return format_html('<span title="{}">{}</span>', line, Truncator(line).chars(SUMMARY_CHARS))
        now = clock.now()
        if wake.state == State.PENDING and wake.due_at is not None and wake.due_at < now:
            return _("due for %(span)s") % {"span": timesince(wake.due_at, now)}
        if wake.state in (State.FIRED, State.FIRING, State.EXPIRED) and wake.claimed_at and wake.due_at:
            late = wake.claimed_at - wake.due_at
            if late > timedelta(0):
                return _("started late by %(span)s") % {"span": _seconds(late)}
        return ""

    @admin.display(description=_("any of these keys too"))
    def watched_keys_list(self, wake: Wake) -> str:
        keys = [w.event_key for w in wake.watched_keys.all()]
        return ", ".join(keys) if keys else "-"

    @admin.display(description=_("intent"))
    def intent_json(self, wake: Wake) -> str:
        return _pretty_json(wake.intent)

    @admin.display(description=_("result"))
    def result_json(self, wake: Wake) -> str:
        return _pretty_json(wake.result)

    @admin.display(description=_("scratch"))
    def scratch_json(self, wake: Wake) -> str:
        return _pretty_json(wake.scratch)

    @admin.display(description=_("last error"))
    def last_error_details(self, wake: Wake) -> str:
        return _error_details(wake.last_error)

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

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Whether the user may run engine transitions here (the ``operate_wake`` permission)."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.operate_wake")

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
        return _pretty_json(event.payload)


@admin.register(SessionControl)
class SessionControlAdmin(ReadOnlyAdmin):
    """Sessions the engine keeps state for: stopped ones (``stop_session``) and agent budgets' last use."""

    list_display = ("session_id", "workspace_id", "stopped_at", "stop_reason", "last_agent_wake_at")
    list_filter = (("stopped_at", admin.EmptyFieldListFilter),)
    search_fields = ("session_id__startswith", "workspace_id__startswith")
    search_help_text = _("Session or workspace, by prefix.")
    ordering = ("-updated_at",)
    show_full_result_count = False
    fields = ("session_id", "workspace_id", "stopped_at", "stop_reason", "last_agent_wake_at", "updated_at")
    readonly_fields = fields


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ("id", "session_id", "key", "state", "created_at", "completed_at", "lease_until")
    list_filter = ("state",)
    search_fields = ("session_id__exact", "key__exact")
    search_help_text = _("Exact session or key.")
    ordering = ("-id",)
    show_full_result_count = False
    # owner (the fence token of the caller running fn) is deliberately absent.
    fields = ("session_id", "key", "state", "result_json", "created_at", "lease_until", "completed_at")
    readonly_fields = fields

    @admin.display(description=_("result"))
    def result_json(self, receipt: Receipt) -> str:
        return _pretty_json(receipt.result)


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
    list_display = ("id", "host", "pid", "started_at", "heartbeat_at", "liveness")
    list_filter = (LivenessFilter,)
    search_fields = ("id", "host")
    ordering = ("-heartbeat_at",)
    fields = ("id", "host", "pid", "started_at", "heartbeat_at", "liveness")
    readonly_fields = fields

    @admin.display(description=_("liveness"))
    def liveness(self, runner: Runner) -> str:
        if runner.is_live:
            return format_html('<span style="color: green">{}</span>', _("live"))
        return format_html(
            '<span style="color: #b00">{}</span>',
            _("stale (last heartbeat %(span)s ago)") % {"span": timesince(runner.heartbeat_at, clock.now())},
        )
