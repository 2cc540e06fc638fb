"""What the console tells an operator to do next: a wake's next step, and whether any runner is running.

The "why" column names the problem (hung, unwakeable, dead, failing, no runner); these name the step
that ends it, with the runner, the lease end and the button or command to use, so the operator on
call does not have to know docs/operations.md by heart. Read-only, bounded: the runner rows a wake
names (by primary key) and the latest heartbeat (``runner_heartbeat_idx``).
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _

from ..models import Runner, State, Wake
from ..querysets import live_since
from .attention import Attention, seconds
from .display import moment, runner_link
from .forms import PauseLaneForm

#: The command that starts a runner, as the docs write it.
RUNWAKES = "python manage.py runwakes"


def runner_status(attention: Attention) -> str:
    """``""`` while some runner is running; else a sentence saying none is, since when, and how to start one."""
    if not attention.no_runner:
        return ""
    last = attention.last_runner
    since = (
        _("No runner has registered yet.")
        if last is None
        else format_html(
            _("The last heartbeat was {age} ago, from {runner} (pid {pid} on {host})."),
            age=seconds(attention.now - last.heartbeat_at),
            runner=runner_link(last.pk, {last.pk}),
            pid=last.pid,
            host=last.host,
        )
    )
    return format_html(
        _(
            "<strong>No runner is running:</strong> due wakes wait, whatever their kind, until one starts "
            "(<code>{command}</code>). {since}"
        ),
        command=RUNWAKES,
        since=since,
    )


def next_step(wake: Wake, attention: Attention) -> str:
    """What to do about this wake now, or ``""`` when it needs nobody (it waits for its time, runs or is done)."""
    if attention.hung_reason(wake):
        return hung_step(wake, attention)
    if attention.is_unwakeable(wake):
        return format_html(
            _(
                "Deploy the sink for kind {kind} where <code>{command}</code> runs and restart the runners (a runner "
                "loads its sinks when it starts), or Cancel this wake."
            ),
            kind=wake.kind,
            command=RUNWAKES,
        )
    if attention.waits_for_paused_lane(wake):
        return format_html(
            _('Resume lane {lane} on <a href="{url}">the lanes page</a>.'),
            lane=wake.serial_key,
            url=reverse("admin:django_wakes_lanes") + "?" + PauseLaneForm.query_for(wake.serial_key or ""),
        )
    if attention.waits_for_a_runner(wake):
        return format_html(_("Start a runner: <code>{command}</code>."), command=RUNWAKES)
    if wake.state == State.DEAD:
        return _("Read the attempt history, fix the cause, then Retry (fresh attempts, due now).")
    if wake.state == State.PENDING and wake.last_error:
        return _(
            "Nothing, if the cause passes: it is retried with backoff and goes dead after %(left)d more failed "
            "attempt(s). Fire now retries it at once; Reschedule moves the retry."
        ) % {"left": wake.max_attempts - wake.attempts}
    return ""


def hung_step(wake: Wake, attention: Attention) -> str:
    """A hung wake: the runner holding it (live or not), its lease end, and how to have it re-driven."""
    runner = Runner.objects.filter(pk=wake.claimed_by).first() if wake.claimed_by else None
    lease = moment(wake.lease_until, zone=True)
    if runner is None or runner.heartbeat_at < live_since(attention.now):
        return format_html(
            _(
                "Its runner {runner} sends no heartbeat any more: its lease lapses at {until}, then any runner "
                "re-drives this wake."
            ),
            runner=runner_link(wake.claimed_by),
            until=lease,
        )
    holds = format_html(
        _(
            "Runner {runner} (pid {pid} on {host}, heartbeat {age} ago) holds it and keeps renewing its lease, "
            "so no other runner takes it over."
        ),
        runner=runner_link(runner.pk, {runner.pk}),
        pid=runner.pid,
        host=runner.host,
        age=seconds(attention.now - runner.heartbeat_at),
    )
    look = format_html(
        _("See what its sink is doing: the runner's log, or <code>{dump}</code> on {host}."),
        dump=f"py-spy dump --pid {runner.pid}",
        host=runner.host,
    )
    restart = format_html(
        _(
            "Then restart that runner (<code>{kill}</code>: it hands back its other wakes at once and exits after "
            "<code>--shutdown-timeout</code>, 30 s by default); its lease, held until {until}, then lapses and any "
            "runner re-drives this wake."
        ),
        kill=f"kill -TERM {runner.pid}",
        until=lease,
    )
    cancel = (
        _("Or Cancel it: this occurrence finishes and its chain ends.")
        if wake.is_recurring
        else _("A firing one-off wake cannot be cancelled or rescheduled from here.")
    )
    return format_html("{} {} {} {}", holds, look, restart, cancel)
