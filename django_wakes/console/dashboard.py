"""The operator dashboard: backlog, lateness, throughput, failures and runners on one admin page.

Server-rendered inside the admin's frame (its header, breadcrumbs, login and ``never_cache``), charts
as inline SVG (:mod:`.charts`), numbers from :mod:`.stats`, whose queries stay bounded at millions of
rows. Staff who may view wakes may see it; anyone else is refused (the admin sends anonymous visitors
to its login page first).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from .. import clock
from . import reads, stats, workspaces
from .advice import runner_status
from .attention import Attention
from .display import moment

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise
from ..states import State
from .charts import ChartSeries, bar_chart


@dataclass(frozen=True)
class Overview:
    """Everything the page shows, read at one moment."""

    now: datetime
    backlog: stats.Backlog
    hung: int
    settled_day: dict[str, int]
    lateness_hour: stats.Histogram
    lateness_day: stats.Histogram
    last_hour: stats.Activity
    last_day: stats.Activity
    missed_day: dict[str, int]
    runners: stats.Runners
    query_seconds: float
    workspaces: list[workspaces.WorkspaceBacklog]


def read_overview(now: datetime) -> Overview:
    """Run the dashboard's queries (each bounded: see :mod:`.stats`) and time them together."""
    started = time.perf_counter()
    attention = Attention(now)
    backlog = stats.backlog(now, attention.fireable_kinds)
    hung = stats.hung(attention)
    settled_day = stats.settled_by_state(now - stats.DAY)
    lateness_hour = stats.lateness(now - stats.HOUR)
    lateness_day = stats.lateness(now - stats.DAY)
    last_hour = stats.activity(now, stats.HOUR, stats.MINUTE)
    last_day = stats.activity(now, stats.DAY, stats.HOUR)
    missed = stats.missed_occurrences(now - stats.DAY)
    runners = stats.runners(now)
    by_workspace = workspaces.by_workspace(now)
    return Overview(
        now=now,
        backlog=backlog,
        hung=hung,
        settled_day=settled_day,
        lateness_hour=lateness_hour,
        lateness_day=lateness_day,
        last_hour=last_hour,
        last_day=last_day,
        missed_day=missed,
        runners=runners,
        query_seconds=time.perf_counter() - started,
        workspaces=by_workspace,
    )


def render_dashboard(request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> HttpResponse:
    """Render the dashboard inside the admin's frame; only users who may view wakes may see it."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    overview = read_overview(clock.now())
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Wakes dashboard"),
        "opts": model_admin.model._meta,
        "overview": overview,
        "as_of": moment(overview.now, zone=True),
        "query_ms": f"{overview.query_seconds * 1000:.0f}",
        "cards": _cards(overview),
        "lateness": _lateness_rows(overview),
        "charts": _charts(overview),
        "kinds": _kind_rows(overview.backlog),
        "workspaces": _workspace_rows(overview),
        "workspace_rows": workspaces.WORKSPACE_ROWS,
        "states": _state_rows(overview),
        "missed": sorted(overview.missed_day.items()),
        "runners": _runner_rows(overview.runners, overview.now),
        "read_lag": reads.replica_lag(),
        "runner_status": runner_status(Attention(overview.now)),
    }
    return TemplateResponse(request, "admin/django_wakes/dashboard.html", context)


def seconds_text(value: float | None, *, beyond: float | None = None) -> str:
    """A duration for reading: ``0.31 s``, ``4.2 min``, ``1.5 h``; ``> 1 h`` past the histogram's top."""
    if value is None:
        return "-"
    if beyond is not None and value >= beyond:
        return f"> {seconds_text(beyond)}"
    if value < 60:
        return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"
    if value < 3600:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _changelist(**query: str) -> str:
    url = reverse("admin:django_wakes_wake_changelist")
    return f"{url}?{urlencode(query)}" if query else url


@dataclass(frozen=True)
class Card:
    """One big number of the backlog row; ``alarm`` frames it red (something needs a person)."""

    label: str
    value: int
    hint: str
    url: str = ""
    alarm: bool = False


def _cards(overview: Overview) -> list[list[Card]]:
    """Two rows: where the wakes are, then what needs a person (each framed red when it is not zero)."""
    total, runners = overview.backlog.total, overview.runners
    dead = overview.settled_day.get(State.DEAD, 0)
    unwakeable = overview.backlog.unwakeable or 0
    flow = [
        Card(_("pending"), total.pending, _("live, waiting for their time"), _changelist(state__exact=State.PENDING)),
        Card(_("waiting"), total.waiting, _("pending on an event or an answer")),
        Card(_("due in the next hour"), total.due_next_hour, _("pending, due within 60 minutes")),
        Card(_("firing"), total.firing, _("held by a runner now"), _changelist(state__exact=State.FIRING)),
        Card(
            _("live runners"),
            runners.live_count,
            _("heartbeat recent"),
            reverse("admin:django_wakes_runner_changelist"),
            alarm=runners.live_count == 0,
        ),
    ]
    attention = [
        Card(
            _("overdue"),
            total.overdue,
            _("due over a minute ago, not fired"),
            _changelist(attention="overdue"),
            alarm=total.overdue > 0,
        ),
        Card(
            _("unwakeable"),
            unwakeable,
            _("due, but no live runner fires its kind"),
            _changelist(attention="unwakeable"),
            alarm=unwakeable > 0,
        ),
        Card(
            _("hung"),
            overview.hung,
            _("firing longer than its lease or its kind's usual time"),
            _changelist(attention="hung"),
            alarm=overview.hung > 0,
        ),
        Card(
            _("lease lapsed"),
            total.lapsed,
            _("firing, runner gone"),
            _changelist(attention="lapsed"),
            alarm=total.lapsed > 0,
        ),
        Card(
            _("dead letters today"),
            dead,
            _("went dead in the last 24 h"),
            _changelist(state__exact=State.DEAD),
            alarm=dead > 0,
        ),
    ]
    return [flow, attention]


@dataclass(frozen=True)
class LatenessRow:
    """Throughput and lateness over one window, formatted for the table."""

    window: str
    measured: int
    p50: str
    p99: str
    fires_per_minute: str
    failures: int


def _lateness_rows(overview: Overview) -> list[LatenessRow]:
    rows = []
    for window, histogram, activity in (
        (_("last hour"), overview.lateness_hour, overview.last_hour),
        (_("last 24 hours"), overview.lateness_day, overview.last_day),
    ):
        top = histogram.bounds[-1]
        # the buckets start at a whole minute or hour: divide by the minutes they really cover
        minutes = max((overview.now - activity.start) / timedelta(minutes=1), 1.0)
        rows.append(
            LatenessRow(
                window=window,
                measured=histogram.count,
                p50=seconds_text(histogram.quantile(0.5), beyond=top),
                p99=seconds_text(histogram.quantile(0.99), beyond=top),
                fires_per_minute=f"{sum(activity.fires) / minutes:.2f}",
                failures=sum(activity.failures),
            )
        )
    return rows


def _labels(times: list[datetime], fmt: str) -> list[str]:
    return [timezone.localtime(t).strftime(fmt) for t in times]


def _charts(overview: Overview) -> dict[str, SafeString]:
    hour, day = overview.last_hour, overview.last_day
    day_labels = _labels(day.times, "%H:%M")
    histogram = overview.lateness_day
    per_bucket = [count - (histogram.cumulative[i - 1] if i else 0) for i, count in enumerate(histogram.cumulative)]
    beyond = histogram.count - (histogram.cumulative[-1] if histogram.cumulative else 0)
    bucket_labels = [f"≤ {seconds_text(bound)}" for bound in histogram.bounds] + [
        f"> {seconds_text(histogram.bounds[-1])}"
    ]
    return {
        "fires_hour": bar_chart(
            chart_id="fires-hour",
            title=_("Attempts per minute, last hour"),
            description=_("%(fires)d fires and %(failures)d failures in the last 60 minutes, one bar a minute.")
            % {"fires": sum(hour.fires), "failures": sum(hour.failures)},
            labels=_labels(hour.times, "%H:%M"),
            series=[
                ChartSeries(_("fires"), "fires", hour.fires),
                ChartSeries(_("failures"), "failures", hour.failures),
            ],
            tick_every=10,
        ),
        "fires_day": bar_chart(
            chart_id="fires-day",
            title=_("Attempts per hour, last 24 hours"),
            description=_("%(fires)d fires and %(failures)d failures in the last 24 hours, one bar an hour.")
            % {"fires": sum(day.fires), "failures": sum(day.failures)},
            labels=day_labels,
            series=[ChartSeries(_("fires"), "fires", day.fires), ChartSeries(_("failures"), "failures", day.failures)],
            tick_every=4,
        ),
        "failures_day": bar_chart(
            chart_id="failures-day",
            title=_("Failures and dead letters per hour, last 24 hours"),
            description=_("%(failures)d failed attempts and %(dead)d wakes gone dead in the last 24 hours.")
            % {"failures": sum(day.failures), "dead": sum(day.dead)},
            labels=day_labels,
            series=[
                ChartSeries(_("failures"), "failures", day.failures),
                ChartSeries(_("dead letters"), "dead", day.dead),
            ],
            tick_every=4,
        ),
        "lateness_day": bar_chart(
            chart_id="lateness-day",
            title=_("Due-to-start lateness, last 24 hours"),
            description=_("How late %(count)d settled attempts started after their due time, by bucket.")
            % {"count": histogram.count},
            labels=bucket_labels,
            series=[ChartSeries(_("attempts"), "lateness", [*per_bucket, beyond])],
            tick_every=2,
        ),
    }


@dataclass(frozen=True)
class KindRow:
    """A kind's live counts, its wake list (none for the summed rest), and whether no live runner fires it."""

    backlog: stats.KindBacklog
    url: str
    unserved: bool


def _kind_rows(backlog: stats.Backlog) -> list[KindRow]:
    fireable = backlog.fireable_kinds
    rows = []
    for k in backlog.by_kind:
        other = k.kind == stats.OTHER_KINDS
        unserved = not other and fireable is not None and k.kind not in fireable
        rows.append(KindRow(k, "" if other else _changelist(kind__exact=k.kind), unserved))
    return rows


@dataclass(frozen=True)
class WorkspaceRow:
    """A workspace's backlog and lateness (:mod:`.workspaces`), formatted, with its pending wakes' list."""

    backlog: workspaces.WorkspaceBacklog
    waited: str  # how long its oldest due wake has been due
    mean_lateness: str  # of its wakes fired in the last hour
    url: str


def _workspace_rows(overview: Overview) -> list[WorkspaceRow]:
    rows = []
    for w in overview.workspaces:
        other = w.workspace_id == workspaces.OTHER_WORKSPACES
        url = "" if other else _changelist(q=w.workspace_id, state__exact=State.PENDING)
        waited = seconds_text(w.waited(overview.now)) if w.due else "-"
        rows.append(WorkspaceRow(w, waited, seconds_text(w.mean_lateness_hour), url))
    return rows


@dataclass(frozen=True)
class StateRow:
    """A state's count, over which window it was counted, and the wake list filtered to it."""

    state: StrOrPromise
    count: int
    window: str
    url: str


def _state_rows(overview: Overview) -> list[StateRow]:
    total = overview.backlog.total
    rows = [
        StateRow(State.PENDING.label, total.pending, _("now"), _changelist(state__exact=State.PENDING)),
        StateRow(State.FIRING.label, total.firing, _("now"), _changelist(state__exact=State.FIRING)),
    ]
    for value, count in overview.settled_day.items():
        label = State(value).label
        rows.append(StateRow(label, count, _("settled in the last 24 h"), _changelist(state__exact=value)))
    return rows


@dataclass(frozen=True)
class RunnerRow:
    """A live runner with links to its page and to the wakes it holds."""

    in_hand: stats.RunnerInHand
    url: str
    started: SafeString | str
    heartbeat_age: str
    wakes: list[tuple[stats.HeldWake, str, SafeString | str]]


def _runner_rows(runners: stats.Runners, now: datetime) -> list[RunnerRow]:
    rows = []
    for entry in runners.live:
        runner = entry.runner
        rows.append(
            RunnerRow(
                in_hand=entry,
                url=reverse("admin:django_wakes_runner_change", args=[runner.pk]),
                started=moment(runner.started_at, zone=True),
                heartbeat_age=seconds_text(max((now - runner.heartbeat_at) / timedelta(seconds=1), 0.0)),
                wakes=[
                    (
                        wake,
                        reverse("admin:django_wakes_wake_change", args=[wake.id]),
                        moment(wake.claimed_at, zone=True),
                    )
                    for wake in entry.wakes
                ],
            )
        )
    return rows
