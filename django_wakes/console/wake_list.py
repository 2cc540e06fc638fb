"""The wake list: its filters, its bounded count, its columns and its search.

Every filter lists its choices without scanning the table, the count stops at :data:`COUNT_CAP`, and the
"why" column asks one :class:`~django_wakes.console.attention.Attention` per page for all its rows.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from .. import clock
from ..models import State, Wake
from ..querysets import WakeQuerySet
from ..sinks import registry
from . import reads
from .advice import runner_status
from .attention import Attention, current_attention, rendered_with_attention
from .display import clock_time, describe_trigger, key_html, shorten, task_call, unwakeable_choice, why
from .forms import PauseLaneForm

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # django-stubs makes the admin classes generic; at run time they are not subscriptable.
    ModelAdmin = admin.ModelAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin

#: A task's call and output are sent at most this long (the list shows one line of them, the rest on hover).
CALL_CHARS = 200
#: The wake list counts its matches up to this many and says "more than" beyond (COUNT(*) of 1M rows is not free).
COUNT_CAP = 10_000


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
    A kind no live runner fires that has due wakes is listed too, marked unwakeable
    (:meth:`Attention.unwakeable_kinds`); any other is reachable by search (its prefix) or ``?kind=...``.
    """

    title = _("kind")
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, StrOrPromise]]:
        attention = current_attention()
        kinds: dict[str, StrOrPromise] = {kind: kind for kind in {*registry.kinds(), *attention.fireable_kinds}}
        if request.method != "POST":
            # An action's POST builds the list only to narrow its selection, and acts on the primary: its
            # choices are not shown, so they are not read (from the replica, under READ_DATABASE) either.
            kinds.update((kind, unwakeable_choice(kind)) for kind in attention.unwakeable_kinds())
        chosen = self.value()
        if chosen:
            kinds.setdefault(chosen, chosen)
        return sorted(kinds.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Wake]) -> QuerySet[Wake] | None:
        return queryset.filter(kind=self.value()) if self.value() else None


class CappedPaginator(Paginator):  # type: ignore[type-arg]  # generic in django-stubs only
    """Counts matches only up to :data:`COUNT_CAP` (a bounded query), so a list view never counts a million rows."""

    @cached_property
    def count(self) -> int:
        rows = cast(QuerySet[Wake], self.object_list)
        return rows.order_by()[: COUNT_CAP + 1].count()


class WakeList(ModelAdmin):
    """The wake list's configuration, views and columns (mixed into ``WakeAdmin``)."""

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
    change_list_template = "admin/django_wakes/wake/change_list.html"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, rendered while one :class:`Attention` answers "hung?" and "unwakeable?" for all its rows."""
        context = {
            **(extra_context or {}),
            "operator_zone": timezone.get_current_timezone_name(),
            "count_cap": COUNT_CAP,
            "read_lag": reads.replica_lag() if reads.for_listing(request) else None,
            "runner_status": lambda: runner_status(current_attention()),  # read while the page renders
        }
        return rendered_with_attention(lambda: super(WakeList, self).changelist_view(request, context))

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The list's page of wakes, whose lanes' holders are then read in one query (for "why")."""
        changelist = super().get_changelist_instance(request)
        current_attention().know_lanes(list(changelist.result_list))
        return changelist

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
        return describe_trigger(wake, current_attention().now)

    @admin.display(description=_("lane"), ordering="serial_key")
    def lane(self, wake: Wake) -> str:
        if not wake.serial_key:
            return "-"
        url = reverse("admin:django_wakes_lanes") + "?" + PauseLaneForm.query_for(wake.serial_key)
        return format_html('<a href="{}">{}</a>', url, key_html(wake.serial_key))

    @admin.display(description=_("workspace"), ordering="workspace_id")
    def workspace(self, wake: Wake) -> str:
        return shorten(wake.workspace_id)

    @admin.display(description=_("due · claimed · settled"))
    def when(self, wake: Wake) -> str:
        """The moment that matters in this state: due (pending), claimed (firing), settled (ended).

        The state column says which, so the cell holds the time alone (one line at 1440 px).
        """
        now = current_attention().now
        if wake.state == State.PENDING:
            return clock_time(wake.due_at, now)
        if wake.state == State.FIRING:
            return clock_time(wake.claimed_at, now)
        return clock_time(wake.settled_at or wake.updated_at, now)

    @admin.display(description=_("attempts"), ordering="attempts")
    def attempts_of_max(self, wake: Wake) -> str:
        return f"{wake.attempts}/{wake.max_attempts}"

    @admin.display(description=_("why"))
    def why(self, wake: Wake) -> str:
        return why(wake, current_attention())
