"""The wake page: the fields worth showing for this wake, what it is doing now, its attempt history.

Secrets stay hidden: the approval ``token_hash`` and the claim token are never among its fields. The
operator's buttons are :data:`~django_wakes.console.operations.OPERATIONS` that apply to the wake now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from .. import clock
from ..models import State, Wake, WakeAttempt
from .advice import next_step
from .attention import current_attention, rendered_with_attention, seconds
from .display import chain_link, describe_trigger, error_details, moment, pretty_json, runner_link, task_call, why
from .operations import OPERATIONS, OperatorMixin

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # django-stubs makes the admin classes generic; at run time they are not subscriptable.
    AttemptInline = admin.TabularInline[WakeAttempt, Wake]
else:
    AttemptInline = admin.TabularInline

#: The wake page's Recurrence fields: shown for a recurring wake or a chain's occurrence only.
RECURRENCE_FIELDS = ("chain", "occurrence", "cron", "every", "tz", "catch_up", "start_at_s", "end_at_s")


class WakeAttemptInline(AttemptInline):
    model = WakeAttempt
    extra = 0
    can_delete = False
    show_change_link = False
    verbose_name_plural = _("attempt history")
    template = "admin/django_wakes/wake/attempt_history.html"  # the rows without a caption each
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


def _time_field(name: str, label: StrOrPromise) -> Callable[[Any, Wake], str]:
    """A read-only display of one time field of a wake, to the second (Django's own stops at the minute)."""

    @admin.display(description=label, ordering=name)
    def show(self: Any, wake: Wake) -> str:
        return moment(getattr(wake, name), zone=True)

    return show


class WakePage(OperatorMixin):
    """The wake page's fields, attempt history and buttons (mixed into ``WakeAdmin``)."""

    inlines = (WakeAttemptInline,)
    change_form_template = "admin/django_wakes/wake/change_form.html"
    # token_hash, claim_token and coalesce_key are deliberately absent.
    fieldsets = (
        (None, {"fields": ("id", "state", "why_now", "next_step", "trigger_as_written", "what_it_does", "in_flight")}),
        (
            _("Identity"),
            {"fields": ("kind", "workspace_id", "session_id", "lane", "queue_name", "priority", "limit_key")},
        ),
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
        {"id", "state", "trigger_as_written", "kind", "workspace_id", "queue_name", "attempts", "max_attempts"}
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
        return rendered_with_attention(lambda: super(WakePage, self).change_view(request, object_id, form_url, context))

    @admin.display(description=_("why"))
    def why_now(self, wake: Wake) -> str:
        return why(wake, current_attention()) or "-"

    @admin.display(description=_("next step"))
    def next_step(self, wake: Wake) -> str:
        return next_step(wake, current_attention()) or "-"

    @admin.display(description=_("trigger"))
    def trigger_as_written(self, wake: Wake) -> str:
        """The wake page's trigger: its times with their date (the list leaves today's out)."""
        return describe_trigger(wake)

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
