"""Prometheus metrics of the wakes, read from the database (text exposition format 0.0.4, by hand).

**Why from the database, not from in-process counters.** Wakes are fired by any number of ``runwakes``
processes on any number of machines, and the scraper reaches a web process, which fires nothing. A
counter kept in a runner's memory would need a scrape target per runner, would vanish with the
process, and would miss what the others did. The database has seen every attempt of every runner:
the attempt log (``WakeAttempt``, one row per attempt, written by its settle) is the record. So every
web process answers the same numbers, whichever one the scrape reaches.

**How a count over rows stays a counter.** A count of the whole log grows without bound in cost (and
``gc`` shrinks it). Instead each counter counts the rows written *since the start of the current UTC
hour* (attempts by ``finished_at`` through ``wakeattempt_finished_idx``; settled wakes, their lateness
and missed occurrences by when they settled): it only grows within the hour and drops to its new value
when the hour turns, which ``rate()`` and ``increase()`` read as a counter reset (as after a restart).
The cost of a scrape is bounded by one hour of traffic. What is lost: the attempts finished between
the last scrape of an hour and the hour's end (half a scrape interval per hour on average, about 0.2%
at a 15 s interval). ``django_wakes_counters_since_timestamp_seconds`` tells where the counting began.
Attempt rows are only ever inserted, so those counters never go down within the hour; settled wakes
(``django_wakes_settled_total``) go down only if an operator requeues a wake that died this very hour.

Backlog gauges count the live rows (pending and firing) exactly, by kind (at most
:data:`~django_wakes.console.stats.KIND_ROWS` kinds; the rest as ``kind="(other kinds)"``), and per
workspace (:mod:`.workspaces`: the :data:`~django_wakes.console.workspaces.WORKSPACE_ROWS` workspaces
with the most due wakes, the rest as ``workspace="(other workspaces)"``: a bounded label set however
many tenants there are).

**Access.** A request carrying ``Authorization: Bearer <token>`` with one of ``WAKES["METRICS_TOKENS"]``
(compared in constant time), or a logged-in staff user who may view wakes. Anyone else gets 401 (no
credentials or a wrong token) or 403 (logged in, not allowed). The token is never logged or echoed.
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .. import clock
from ..conf import wakes_settings
from ..states import Outcome
from . import reads, stats, workspaces
from .attention import Attention

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: A token shorter than this is refused by the system check (``django_wakes.E010``).
TOKEN_MIN_LENGTH = 32
PREFIX = "django_wakes_"

Labels = dict[str, str]
Sample = tuple[str, Labels, float]  # (suffix, labels, value)


def escape_label(value: str) -> str:
    """Escape a label value as the text format requires: backslash, double quote and line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


class Exposition:
    """The text of one scrape: metric families, each with its HELP, TYPE and samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> None:
        full = PREFIX + name
        self.lines.append(f"# HELP {full} {_escape_help(help_text)}")
        self.lines.append(f"# TYPE {full} {kind}")
        for suffix, labels, value in samples:
            rendered = ",".join(f'{key}="{escape_label(str(val))}"' for key, val in labels.items())
            self.lines.append(
                f"{full}{suffix}{{{rendered}}} {_number(value)}" if labels else f"{full}{suffix} {_number(value)}"
            )

    def gauge(self, name: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> None:
        self.family(name, "gauge", help_text, (("", labels, value) for labels, value in samples))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def hour_start(now: datetime) -> datetime:
    """The start of ``now``'s UTC hour: where the counters begin counting."""
    return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def exposition(now: datetime) -> str:
    """Read the database and render every metric family (see the module's docstring for what and why)."""
    started = time.perf_counter()
    since = hour_start(now)
    attention = Attention(now)
    backlog = stats.backlog(now, attention.fireable_kinds)
    hung = stats.hung(attention)
    attempts = stats.attempts_by_outcome(since)
    settled = stats.settled_by_state(since)
    lateness = stats.lateness(since)
    missed = stats.missed_occurrences(since)
    runners = stats.runners(now, wakes_per_runner=0)
    by_workspace = workspaces.by_workspace(now)
    out = Exposition()
    kinds = backlog.by_kind
    out.gauge(
        "live_wakes",
        "Live wakes by state (pending, firing) and kind, counted exactly.",
        (({"state": state, "kind": k.kind}, getattr(k, state)) for k in kinds for state in ("pending", "firing")),
    )
    out.gauge(
        "waiting_wakes",
        "Pending wakes whose event or answer has not come (due only at their expiry, if any).",
        (({"kind": k.kind}, k.waiting) for k in kinds),
    )
    out.gauge(
        "overdue_wakes",
        "Pending wakes due over a minute ago: no runner is firing them in time.",
        (({"kind": k.kind}, k.overdue) for k in kinds),
    )
    out.gauge(
        "due_next_hour_wakes",
        "Pending wakes due within the next hour.",
        (({"kind": k.kind}, k.due_next_hour) for k in kinds),
    )
    out.gauge(
        "lapsed_wakes",
        "Firing wakes whose lease ran out (their runner is gone; another takes them over).",
        (({"kind": k.kind}, k.lapsed) for k in kinds),
    )
    out.gauge(
        "unwakeable_wakes",
        "Due (or lapsed) wakes of a kind no live runner fires: no runner will ever take them as things are.",
        [({}, backlog.unwakeable or 0)],
    )
    out.gauge(
        "hung_wakes",
        "Firing wakes running longer than the lease or far longer than their kind usually takes.",
        [({}, hung)],
    )
    oldest = backlog.oldest_overdue
    out.gauge(
        "oldest_overdue_seconds",
        "How long the oldest overdue wake has been due (0 when none is overdue).",
        [({}, max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)],
    )
    out.gauge(
        "counters_since_timestamp_seconds",
        "Unix time the counters below count from: the start of the current UTC hour (they reset hourly).",
        [({}, since.timestamp())],
    )
    out.family(
        "attempts_total",
        "counter",
        "Firing attempts finished since the start of the UTC hour, by outcome (fired, failed, retry, ...).",
        (("", {"outcome": outcome}, attempts[outcome]) for outcome in Outcome.values),
    )
    out.family(
        "settled_total",
        "counter",
        "Wakes that reached each final state since the start of the UTC hour (dead: the dead letters).",
        (("", {"state": state}, count) for state, count in settled.items()),
    )
    out.family(
        "lateness_seconds",
        "histogram",
        "Due-to-start lateness of the wakes fired (or expired) since the start of the UTC hour.",
        _histogram_samples(lateness),
    )
    out.family(
        "occurrences_missed_total",
        "counter",
        "Recurring slots that will never fire (catch-up latest or skip), of occurrences settled this UTC hour.",
        (("", {"policy": policy}, missed.get(policy, 0)) for policy in ("latest", "skip")),
    )
    out.gauge(
        "runners",
        "Runner rows by liveness (live: heartbeat recent; stale: presumed dead).",
        [({"status": "live"}, runners.live_count), ({"status": "stale"}, runners.stale_count)],
    )
    out.gauge(
        "orphaned_wakes",
        "Firing wakes held by no live runner (taken over when their lease lapses).",
        [({}, runners.orphaned)],
    )
    _workspace_gauges(out, by_workspace, now)
    lag = reads.replica_lag()
    if lag is not None:
        out.gauge(
            "read_database_lag_seconds",
            "How far behind the database these metrics are read from (WAKES['READ_DATABASE']) is; NaN: unknown.",
            [({"database": lag.alias}, lag.seconds if lag.seconds is not None else math.nan)],
        )
    out.gauge(
        "scrape_query_seconds",
        "How long this scrape's database queries took.",
        [({}, round(time.perf_counter() - started, 6))],
    )
    return out.text()


def _workspace_gauges(out: Exposition, rows: list[workspaces.WorkspaceBacklog], now: datetime) -> None:
    """Per workspace: the top :data:`~.workspaces.WORKSPACE_ROWS` by due wakes, the rest as one label value."""
    out.gauge(
        "workspace_due_wakes",
        "Pending wakes due now per workspace (the workspaces with the most; the rest summed as '(other workspaces)').",
        (({"workspace": w.workspace_id}, w.due) for w in rows),
    )
    out.gauge(
        "workspace_pending_wakes",
        "Pending wakes per workspace (the same workspaces as workspace_due_wakes).",
        (({"workspace": w.workspace_id}, w.pending) for w in rows),
    )
    out.gauge(
        "workspace_oldest_due_seconds",
        "How long each workspace's oldest due wake has been due: its lateness now (0 when nothing is due).",
        (({"workspace": w.workspace_id}, w.waited(now)) for w in rows),
    )
    out.gauge(
        "workspace_fired_last_hour_wakes",
        "Wakes of each workspace a sink settled (fired or expired) in the last hour.",
        (({"workspace": w.workspace_id}, w.fired_hour) for w in rows),
    )
    out.gauge(
        "workspace_lateness_last_hour_mean_seconds",
        "Mean due-to-start lateness of those wakes (NaN when none fired).",
        (({"workspace": w.workspace_id}, _or_nan(w.mean_lateness_hour)) for w in rows),
    )


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _histogram_samples(histogram: stats.Histogram) -> Iterable[Sample]:
    for bound, count in zip(histogram.bounds, histogram.cumulative, strict=True):
        yield "_bucket", {"le": _number(bound)}, count
    yield "_bucket", {"le": "+Inf"}, histogram.count
    yield "_sum", {}, histogram.sum_seconds
    yield "_count", {}, histogram.count


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def token_accepted(presented: str, tokens: Iterable[str]) -> bool:
    """Whether ``presented`` is one of ``tokens``, compared in constant time against every one of them."""
    given = presented.encode()
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(given, token.encode())
    return matched


def _unauthorized() -> HttpResponse:
    response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = 'Bearer realm="django-wakes metrics"'
    return response


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the exposition to a scraper with a configured bearer token, or to staff who may view wakes."""
    presented = _bearer(request)
    if presented is not None:
        if not token_accepted(presented, wakes_settings.metrics_tokens):
            return _unauthorized()
    else:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return _unauthorized()
        if not (user.is_active and user.is_staff and user.has_perm("django_wakes.view_wake")):
            return HttpResponse("Forbidden.\n", status=403, content_type="text/plain; charset=utf-8")
    return HttpResponse(exposition(clock.now()), content_type=CONTENT_TYPE)
