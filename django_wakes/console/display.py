"""How the console shows a wake: times in the operator's zone, the trigger as written, links, and why it waits.

Shared by the admin pages, the dashboard and the console's template tags, so a time or a trigger
reads the same everywhere.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from ..models import Runner, State, TriggerType, Wake
from .attention import Attention, seconds

SUMMARY_CHARS = 80
#: Keys and paths longer than this are cut in the list (the whole value is on hover): no horizontal scroll.
KEY_CHARS = 28
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


def moment(value: datetime | None, *, zone: bool = False) -> str:
    """A time to the second in the operator's time zone, with UTC on hover."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    shown = local.strftime("%Y-%m-%d %H:%M:%S") + (f" {local.tzname()}" if zone else "")
    utc = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), utc, shown)


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


def describe_trigger(wake: Wake) -> str:
    """The trigger as what it is: ``cron "0 9 * * MON-FRI" (Europe/Paris)``, ``every 5m``, ``at …``, ``event …``."""
    if wake.trigger_type == TriggerType.ON_EVENT:
        return format_html("event {}", shorten(wake.event_key or "?"))
    if wake.trigger_type == TriggerType.ON_APPROVAL:
        return format_html("{}", _("approval"))
    if wake.cron:
        return chain_link(wake, format_html('cron "{}" ({})', wake.cron, wake.tz or "UTC"))
    if wake.every is not None:
        return chain_link(wake, format_html("every {}", compact_duration(wake.every)))
    return format_html('<span class="wake-nowrap">at {}</span>', moment(wake.fire_at))


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
    """The note an operator reads first: hung, unwakeable, held by its lane, dead, the last error, or how late."""
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
    blocker = attention.lane_blocker(wake)
    if blocker is not None:
        return held_by(blocker, attention)
    if wake.state == State.DEAD:
        line = last_line(wake.last_error) or str(_("failed every attempt"))
        return format_html(
            '<strong class="wake-dead" title="{}">{} {}</strong>',
            line,
            _("dead:"),
            Truncator(line).chars(SUMMARY_CHARS),
        )
    if wake.last_error:
        line = last_line(wake.last_error)
        return format_html('<span title="{}">{}</span>', line, Truncator(line).chars(SUMMARY_CHARS))
    now = attention.now
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


def unwakeable_text(wake: Wake) -> str:
    return str(_("unwakeable: no live runner fires kind %(kind)s") % {"kind": wake.kind})


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
