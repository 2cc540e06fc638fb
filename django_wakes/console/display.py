"""How the console shows a wake: times in the operator's zone, the trigger as written, links, and why it waits.

Shared by the admin pages, the dashboard and the console's template tags, so a time or a trigger
reads the same everywhere.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from ..models import Runner, State, TriggerType, Wake
from .attention import Attention, seconds
from .limits import hold_text

SUMMARY_CHARS = 80
#: Keys and paths longer than this are cut in the list (the whole value is on hover): no horizontal scroll.
KEY_CHARS = 28
#: A line-break opportunity (a constant: no data in it).
WBR = SafeString("<wbr>")
#: The kind of the Django Tasks backend's wakes: their intent is ``{"task", "args", "kwargs"}``.
TASK_KIND = "django_wakes.task"


def pretty_json(value: Any) -> str:
    """Render a JSON value for reading: indented, escaped, in a ``<pre>``."""
    if value is None:
        return "-"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def last_line(text: str) -> str:
    """The line of an error worth reading first: a traceback's last line names the exception."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def error_details(text: str) -> str:
    """The last line of an error, expandable to the whole text."""
    if not text:
        return "-"
    summary = Truncator(last_line(text)).chars(SUMMARY_CHARS)
    return format_html("<details><summary>{}</summary><pre>{}</pre></details>", summary, text)


def shorten(text: str, chars: int = KEY_CHARS) -> str:
    """A long key cut to fit a column, whole on hover."""
    if len(text) <= chars:
        return format_html("{}", text)
    return format_html('<span title="{}">{}</span>', text, Truncator(text).chars(chars))


def key_html(text: str, chars: int = KEY_CHARS) -> str:
    """A lane or event key for a narrow column: cut to ``chars`` (whole on hover), breakable only after ``:`` and ``/``.

    ``session:acme:mcp-s1`` then wraps as ``session:acme:`` / ``mcp-s1`` when its column is narrow, never
    inside a name (the browser would otherwise break it at the hyphen): each part is a ``<span>`` the
    console's style keeps on one line, with a ``<wbr>`` between them.
    """
    shown = text if len(text) <= chars else Truncator(text).chars(chars)
    parts = re.split(r"(?<=[:/])", shown)
    breakable = format_html_join(WBR, "<span>{}</span>", ((part,) for part in parts if part))
    if shown == text:
        return format_html('<span class="wake-key">{}</span>', breakable)
    return format_html('<span class="wake-key" title="{}">{}</span>', text, breakable)


def moment(value: datetime | None, *, zone: bool = False) -> str:
    """A time to the second in the operator's time zone, with UTC on hover."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    shown = local.strftime("%Y-%m-%d %H:%M:%S") + (f" {local.tzname()}" if zone else "")
    utc = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), utc, shown)


def clock_time(value: datetime | None, now: datetime) -> str:
    """A time for a list cell: ``07:05:30`` when it falls on today's date (operator's zone), else with its date.

    To the second like :func:`moment`, with UTC (and the date) on hover; the list's rows are mostly
    today's, and the date on each of them cost the columns ~80 px at 1440 px. Another day's date may
    sit on its own line above the time in a narrow column (it never breaks at its hyphens).
    """
    if value is None:
        return "-"
    local = timezone.localtime(value)
    utc = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    hms = local.strftime("%H:%M:%S")
    if local.date() == timezone.localtime(now).date():
        return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), utc, hms)
    date = local.strftime("%Y-%m-%d")
    return format_html(
        '<time datetime="{}" title="{}"><span class="wake-date">{}</span> {}</time>', value.isoformat(), utc, date, hms
    )


def compact_duration(delta: timedelta) -> str:
    """``every`` as a person writes it: ``5m``, ``1h30m``, ``1d``, ``90s`` (what ``schedule(every=...)`` accepts)."""
    total = int(delta.total_seconds())
    if total <= 0 or delta != timedelta(seconds=total):
        return f"{delta.total_seconds():g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def describe_trigger(wake: Wake, now: datetime | None = None) -> str:
    """The trigger as what it is: ``cron "0 9 * * MON-FRI" (Europe/Paris)``, ``every 5m``, ``at …``, ``event …``.

    With ``now`` (the list), written for a narrow column: a time without today's date, keys and zones
    breakable after ``:`` and ``/``.
    """
    listed = now is not None
    if wake.trigger_type == TriggerType.ON_EVENT:
        return format_html("event {}", key_html(wake.event_key or "?") if listed else shorten(wake.event_key or "?"))
    if wake.trigger_type == TriggerType.ON_APPROVAL:
        return format_html("{}", _("approval"))
    if wake.cron:
        zone = wake.tz or "UTC"
        return chain_link(wake, format_html('cron "{}" ({})', wake.cron, key_html(zone, 64) if listed else zone))
    if wake.every is not None:
        return chain_link(wake, format_html("every {}", compact_duration(wake.every)))
    at = clock_time(wake.fire_at, now) if now is not None else moment(wake.fire_at)
    return format_html('<span class="wake-nowrap">at {}</span>', at)


def chain_link(wake: Wake, text: str) -> str:
    """A recurring wake's schedule, linked to its chain's page (past occurrences, next fire times)."""
    if not wake.chain_id:
        return text
    url = reverse("admin:django_wakes_chain", args=[wake.chain_id])
    return format_html('<a href="{}" title="{}">{}</a>', url, _("the chain's page"), text)


def task_call(wake: Wake) -> str | None:
    """A Django Tasks wake's call as text, ``module.fn(1, "a", key=2)``; None for other wakes."""
    intent = wake.intent if wake.kind == TASK_KIND else None
    if not isinstance(intent, dict) or not isinstance(intent.get("task"), str):
        return None
    args = intent.get("args") if isinstance(intent.get("args"), list) else []
    kwargs = intent.get("kwargs") if isinstance(intent.get("kwargs"), dict) else {}
    shown = [json.dumps(a, ensure_ascii=False) for a in args or []]
    shown += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (kwargs or {}).items()]
    return f"{intent['task']}({', '.join(shown)})"


def runner_link(runner_id: str, known: set[str] | None = None) -> str:
    """Link a runner id to its Runner page (if its row still exists: rows of long-dead runners age out)."""
    if not runner_id:
        return "-"
    exists = runner_id in known if known is not None else Runner.objects.filter(pk=runner_id).exists()
    if not exists:
        return format_html('{} <span class="quiet">({})</span>', runner_id, _("gone"))
    url = reverse("admin:django_wakes_runner_change", args=[quote(runner_id)])
    return format_html('<a href="{}">{}</a>', url, runner_id)


def wake_link(wake_id: int) -> str:
    return format_html('<a href="{}">{}</a>', reverse("admin:django_wakes_wake_change", args=[wake_id]), wake_id)


def why(wake: Wake, attention: Attention) -> str:
    """The note an operator reads first: hung, unwakeable, paused, no runner, held by its lane or a limit, dead,
    failing, late."""
    hung = attention.hung_reason(wake)
    if hung:
        return format_html('<strong class="wake-hung">{} {}</strong>', _("hung:"), hung)
    if attention.is_unwakeable(wake):
        return format_html('<strong class="wake-unwakeable">{}</strong>', unwakeable_text(wake))
    if attention.waits_for_paused_lane(wake):
        return format_html(
            '<strong class="wake-paused">{}</strong>',
            _("lane %(lane)s is paused: it fires once the lane is resumed") % {"lane": wake.serial_key},
        )
    now = attention.now
    if attention.waits_for_a_runner(wake):
        if wake.state == State.FIRING:
            waiting = lapsed_text(wake, now)
        elif wake.last_error:
            waiting = retry_text(wake, now)
        else:
            waiting = str(_("due for %(span)s") % {"span": seconds(now - (wake.due_at or now))})
        shown = format_html('<strong class="wake-no-runner">{}</strong> {}', _("no runner is running:"), waiting)
        return format_html("{} · {}", shown, error_line(wake.last_error)) if wake.last_error else shown
    blocker = attention.lane_blocker(wake)
    if blocker is not None:
        return held_by(blocker, attention)
    hold = attention.limit_hold(wake)
    if hold is not None:
        return format_html('<strong class="wake-limited">{}</strong>', hold_text(hold, attention.now))
    if wake.state == State.DEAD:
        line = last_line(wake.last_error) or str(_("failed every attempt"))
        return format_html(
            '<strong class="wake-dead" title="{}">{} {}</strong>',
            line,
            _("dead:"),
            Truncator(line).chars(SUMMARY_CHARS),
        )
    if wake.last_error and wake.state == State.PENDING:
        retry = retry_text(wake, now)
        return format_html('<span class="wake-retry">{}</span> · {}', retry, error_line(wake.last_error))
    if wake.last_error:
        return error_line(wake.last_error)
    if wake.state == State.PENDING and wake.due_at is not None and wake.due_at < now:
        return _("due for %(span)s") % {"span": seconds(now - wake.due_at)}
    if attention.lapsed(wake) and wake.lease_until is not None:
        return format_html('<strong class="wake-lapsed">{}</strong>', lapsed_text(wake, now))
    if wake.state == State.FIRING:
        running = attention.running_for(wake)
        return _("firing for %(span)s") % {"span": seconds(running)} if running is not None else ""
    if wake.state in (State.FIRED, State.EXPIRED) and wake.claimed_at and wake.due_at:
        late = wake.claimed_at - wake.due_at
        if late > timedelta(0):
            return _("started late by %(span)s") % {"span": seconds(late)}
    return ""


def error_line(error: str) -> str:
    """The last line of an error, cut to fit a cell, whole on hover."""
    line = last_line(error)
    return format_html('<span title="{}">{}</span>', line, Truncator(line).chars(SUMMARY_CHARS))


def retry_text(wake: Wake, now: datetime) -> str:
    """A failing wake's next attempt: ``retry 3 of 5 at 07:05:30``, or ``retry 3 of 5 due for 4.5s`` once due."""
    numbers = {"next": wake.attempts + 1, "max": wake.max_attempts}
    if wake.due_at is None or wake.due_at > now:
        return format_html("{} {}", _("retry %(next)d of %(max)d at") % numbers, clock_time(wake.due_at, now))
    return str(_("retry %(next)d of %(max)d due for %(span)s") % {**numbers, "span": seconds(now - wake.due_at)})


def unwakeable_text(wake: Wake) -> str:
    return str(_("unwakeable: no live runner fires kind %(kind)s") % {"kind": wake.kind})


def unwakeable_choice(kind: str) -> str:
    """A kind filter's choice for a kind with due wakes that no live runner fires: the kind, marked."""
    return str(_("%(kind)s (unwakeable: no live runner fires it)") % {"kind": kind})


def lapsed_text(wake: Wake, now: datetime) -> str:
    assert wake.lease_until is not None
    return str(
        _("lease lapsed %(span)s ago: its runner is gone; any runner re-drives it")
        % {"span": seconds(now - wake.lease_until)}
    )


def ahead_state(ahead: Wake, attention: Attention) -> tuple[str, bool]:
    """What a wake its lane fires first is doing, and whether that needs an operator (hung, lapsed, unwakeable)."""
    hung = attention.hung_reason(ahead)
    if hung:
        return format_html("{} {}", _("hung:"), hung), True
    if attention.lapsed(ahead):
        return lapsed_text(ahead, attention.now), True
    if ahead.state == State.FIRING:
        return format_html("{} {}", _("firing since"), moment(ahead.sink_started_at or ahead.claimed_at)), False
    if attention.is_unwakeable(ahead):
        return unwakeable_text(ahead), True
    due = ahead.due_at or attention.now
    return str(_("pending, due for %(span)s") % {"span": seconds(max(attention.now - due, timedelta(0)))}), False


def held_by(ahead: Wake, attention: Attention) -> str:
    """A due wake its lane holds back: the wake the lane fires first, linked, and what that one is doing.

    Red when the wake ahead needs an operator (hung, lease lapsed, unwakeable); plain when it is merely
    running or about to be claimed.
    """
    state, alarming = ahead_state(ahead, attention)
    text = _("lane held by wake") if ahead.state == State.FIRING else _("waits in its lane behind wake")
    link = format_html(
        '<a href="{}" title="{}">{}</a>',
        reverse("admin:django_wakes_wake_change", args=[ahead.pk]),
        ahead.kind,
        ahead.pk,
    )
    shown = (
        '<strong class="wake-lane-held">{} {}, {}</strong>'
        if alarming
        else '<span class="wake-lane-waits">{} {}, {}</span>'
    )
    return format_html(shown, text, link, state)


def holder_note(holder: Wake, attention: Attention) -> str:
    """The lanes page's word on a lane's firing holder: red when it is hung or its lease lapsed."""
    state, alarming = ahead_state(holder, attention)
    return format_html('<strong class="wake-lane-held">{}</strong>', state) if alarming else state
