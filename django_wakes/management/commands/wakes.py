"""``manage.py wakes status|gc|sync-periodic|preview``: the wake table at a glance, clean-up, periodic
tasks, a schedule's next fire times.

Each subcommand accepts Django's common options (``--settings``, ``--verbosity``, ``--traceback``,
``--pythonpath``, ``--no-color`` …) after its name as well as before it: argparse hands everything after
a subcommand to that subcommand's parser, so each one carries the options too (defaulting to "not
given", so one typed before the subcommand is kept).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, Min
from django.utils import timezone

from django_wakes import clock, engine
from django_wakes.conf import wakes_settings
from django_wakes.console import limits, stats
from django_wakes.console.attention import Attention, seconds
from django_wakes.durations import parse_duration
from django_wakes.engine.schema import not_migrated_message, unapplied_migrations
from django_wakes.exceptions import InvalidDuration, InvalidWake
from django_wakes.models import Runner, SessionControl, State, Wake
from django_wakes.tasks import TASK_KIND
from django_wakes.text import printable

#: ``wakes status`` lists at most this many stopped sessions (newest first).
STOPPED_SHOWN = 20

#: What each count of ``wakes status``'s "Needs attention" block means (the dashboard's second row of cards).
ATTENTION = {
    "overdue": "due over a minute ago, not fired",
    "unwakeable": "due, but no live runner fires its kind",
    "hung": "firing longer than its lease or its kind's usual time",
    "lapsed": "firing, lease run out: its runner is gone",
    "dead": "dead letters (retry them from the admin)",
}


def status_snapshot() -> dict[str, Any]:
    """Return counts per state, what needs attention, the due backlog, the oldest overdue and next due
    wake, stopped sessions and live runners (times as ISO 8601 strings, durations in seconds).

    The attention counts are the dashboard's (:mod:`django_wakes.console.stats` and
    :class:`~django_wakes.console.attention.Attention`), read with the same bounded queries.
    """
    now = clock.now()
    wakes = Wake.objects.using(engine.db_alias())
    counts = {state: 0 for state in State.values}
    for row in wakes.values("state").annotate(n=Count("id")).order_by():
        counts[row["state"]] = row["n"]
    tasks = {state: 0 for state in State.values}  # Django Tasks run by django_wakes.tasks.WakesBackend
    for row in wakes.filter(kind=TASK_KIND).values("state").annotate(n=Count("id")).order_by():
        tasks[row["state"]] = row["n"]
    attention = Attention(now)
    backlog = stats.backlog(now, attention.fireable_kinds)
    due = wakes.due(now)
    # Overdue as the attention count has it (due over OVERDUE_AFTER ago), not merely due: the two agree.
    oldest = (
        wakes.overdue(now)
        .order_by("due_at", "id")
        .values("id", "kind", "serial_key", "due_at", "limit_key", "workspace_id")
        .first()
    )
    oldest_due: datetime | None = oldest["due_at"] if oldest is not None else None
    next_due = wakes.pending().filter(due_at__gt=now).aggregate(m=Min("due_at"))["m"]
    live = Runner.objects.using(engine.db_alias()).live(now)
    return {
        "now": now.isoformat(),
        "states": counts,
        "tasks": tasks,
        "attention": {
            "overdue": backlog.total.overdue,
            "unwakeable": backlog.unwakeable or 0,
            "hung": stats.hung(attention),
            "lapsed": backlog.total.lapsed,
            "dead": counts[State.DEAD],
            "dead_last_24h": stats.settled_by_state(now - stats.DAY)[State.DEAD],
        },
        "fireable_kinds": sorted(attention.fireable_kinds),
        "due_backlog": due.count(),
        "oldest_overdue": None
        if oldest is None or oldest_due is None
        else {
            "id": oldest["id"],
            "kind": oldest["kind"],
            "lane": oldest["serial_key"],
            "due_at": oldest_due.isoformat(),
            "late_seconds": round((now - oldest_due).total_seconds(), 3),
            "held": _held(oldest, attention),
        },
        "next_due_at": next_due.isoformat() if next_due else None,
        "limits": [
            {
                "key": row.limit.name,
                "scope": str(row.limit.scope),
                "limit": row.limit.text,
                "size": row.limit.size,
                "in_use": row.in_use,
                "waiting": row.waiting,
                "full": row.full,
                "held": row.holds_until(now) if row.full else None,
                "until": row.until.isoformat() if row.full and row.until else None,
            }
            for row in limits.overview(now, engine.db_alias())
        ],
        "stopped_sessions": [
            {
                "workspace_id": c.workspace_id,
                "session_id": c.session_id,
                "stopped_at": c.stopped_at.isoformat(),
                "reason": c.stop_reason,
            }
            for c in SessionControl.objects.using(engine.db_alias())
            .filter(stopped_at__isnull=False)
            .order_by("-stopped_at")[:STOPPED_SHOWN]
            if c.stopped_at is not None
        ],
        "runners": [
            {
                "id": r.id,
                "host": r.host,
                "pid": r.pid,
                "kinds": r.kinds,
                "started_at": r.started_at.isoformat(),
                "heartbeat_at": r.heartbeat_at.isoformat(),
            }
            for r in live.order_by("started_at")
        ],
    }


def _held(values: Mapping[str, Any], attention: Attention) -> str | None:
    """Which full limit holds this due wake back and until when (``None``: none)."""
    hold = attention.limit_hold(Wake(state=State.PENDING, **{k: v for k, v in values.items() if k != "id"}))
    return None if hold is None else limits.hold_text(hold, attention.now)


def local_time(iso: str) -> str:
    """An ISO 8601 time from the snapshot as a person reads it: to the second, in ``TIME_ZONE``, zone named."""
    local = timezone.localtime(datetime.fromisoformat(iso))
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def since(iso: str, now: datetime) -> str:
    """How long ago (or, for a future time, how far ahead) an ISO 8601 time from the snapshot is."""
    delta = now - datetime.fromisoformat(iso)
    return f"{seconds(delta)} ago" if delta.total_seconds() >= 0 else f"in {seconds(-delta)}"


class Command(BaseCommand):
    help = (
        "Look after the wake table: status (counts, what needs attention, runners), gc (delete old "
        "terminal wakes), sync-periodic (book periodic tasks' chains), preview (a schedule's next fire "
        "times), mcp (the agent tools over MCP on stdio). 'wakes SUBCOMMAND --help' tells more."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        self._common_options: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_base_argument(self, parser: CommandParser, *args: Any, **kwargs: Any) -> None:
        """Add one of Django's common options, and remember it for the subcommands' parsers."""
        super().add_base_argument(parser, *args, **kwargs)
        if "--version" not in args:  # a property of the command, not of a subcommand
            self._common_options.append((args, kwargs))

    def _subcommand(self, sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
        """A subcommand's parser that also takes Django's common options (given after the subcommand)."""
        parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
        for args, kwargs in self._common_options:
            parser.add_argument(*args, **{**kwargs, "default": argparse.SUPPRESS})
        if self.requires_system_checks:
            parser.add_argument(
                "--skip-checks", action="store_true", default=argparse.SUPPRESS, help="Skip system checks."
            )
        return parser

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, title="subcommands", metavar="SUBCOMMAND")
        status = self._subcommand(
            sub,
            "status",
            "Counts per state; what needs attention (overdue, unwakeable, hung, lapsed, dead); the due "
            "backlog, oldest overdue and next due wake; stopped sessions; live runners.",
        )
        status.add_argument("--json", action="store_true", help="Print JSON for scripts (ISO 8601 times, seconds).")
        gc = self._subcommand(sub, "gc", "Delete terminal wakes older than --older-than (WAKES['GC_AFTER']).")
        gc.add_argument("--older-than", default=None, help="A duration such as 30d (default WAKES['GC_AFTER']).")
        self._subcommand(
            sub,
            "sync-periodic",
            "Book, re-plan and end periodic tasks' chains to match the declarations (idempotent).",
        )
        preview = self._subcommand(
            sub, "preview", "The next fire times of a cron or every schedule, in local time and UTC, DST marked."
        )
        preview.add_argument("cron", nargs="?", default=None, help='A cron expression, e.g. "0 9 * * MON-FRI".')
        preview.add_argument(
            "--cron", dest="cron_option", default=None, help="The cron expression as an option (as preview(cron=...))."
        )
        preview.add_argument("--every", default=None, help="An interval instead of cron, e.g. 90m.")
        preview.add_argument("--tz", default=None, help="The IANA zone (default settings.TIME_ZONE).")
        preview.add_argument("-n", type=int, default=10, help="How many fire times (default %(default)r).")
        preview.add_argument(
            "--start", default=None, help="ISO date/time to start after (naive: in --tz; default now)."
        )
        preview.add_argument("--dst", default=None, help="DST policy, e.g. ambiguous=both,missing=skip (cron only).")
        mcp = self._subcommand(
            sub, "mcp", "Serve the agent tools to one session over MCP on stdin/stdout (pip install django-wakes[mcp])."
        )
        mcp.add_argument("--workspace", required=True, help="The session's workspace_id.")
        mcp.add_argument("--session", required=True, help="The session_id whose wakes the tools make and see.")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action in ("status", "gc", "sync-periodic"):
            alias = engine.db_alias()
            missing = unapplied_migrations(alias)
            if missing:
                raise CommandError(not_migrated_message(alias, missing))
        if action == "gc":
            self._gc(options["older_than"])
        elif action == "sync-periodic":
            self._sync_periodic()
        elif action == "mcp":
            try:
                import anyio  # noqa: F401
                import mcp  # noqa: F401
            except ImportError as exc:
                raise CommandError(
                    f"wakes mcp needs the MCP SDK, which is not installed ({exc.name} is missing): "
                    "pip install 'django-wakes[mcp]'"
                ) from exc
            from django_wakes.agents.mcp_server import serve_stdio

            try:
                serve_stdio(workspace_id=options["workspace"], session_id=options["session"])
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        elif action == "preview":
            if options["cron"] is not None and options["cron_option"] not in (None, options["cron"]):
                raise CommandError("preview: give the cron expression once, as an argument or as --cron")
            self._preview(
                cron=options["cron"] if options["cron"] is not None else options["cron_option"],
                every=options["every"],
                tz=options["tz"],
                n=options["n"],
                start=options["start"],
                dst=options["dst"],
            )
        else:
            self._status(as_json=options["json"])

    def _gc(self, older_than: str | None) -> None:
        value = older_than if older_than is not None else wakes_settings.get("GC_AFTER")
        if value is None:
            raise CommandError("WAKES['GC_AFTER'] is None (gc disabled); pass --older-than to gc anyway")
        try:
            parse_duration(value, name="--older-than")
        except InvalidDuration as exc:
            raise CommandError(str(exc)) from exc
        deleted = engine.gc(older_than=value)
        self.stdout.write(f"deleted {deleted} terminal wake(s) older than {value}")

    def _sync_periodic(self) -> None:
        from django_wakes.tasks import framework_available

        if not framework_available():
            raise CommandError("periodic tasks need django.tasks (Django 6) or the django-tasks backport")
        from django_wakes.exceptions import WakeError
        from django_wakes.tasks.periodic_tasks import sync_periodic

        try:
            report = sync_periodic()
        except WakeError as exc:
            raise CommandError(str(exc)) from exc
        for label, names in (("booked", report.booked), ("re-planned", report.replanned), ("ended", report.ended)):
            for name in names:
                self.stdout.write(f"{label}: {printable(name)}")
        self.stdout.write(
            f"periodic tasks: {len(report.booked)} booked, {len(report.replanned)} re-planned, "
            f"{len(report.ended)} ended, {len(report.kept)} unchanged"
        )

    def _status(self, *, as_json: bool) -> None:
        snap = status_snapshot()
        if as_json:  # json.dumps escapes every control character (and all non-ASCII text)
            self.stdout.write(json.dumps(snap, indent=2))
            return
        snap = _printable(snap)  # ids, lanes, kinds, reasons, hosts: a row may hold what a terminal obeys
        now = datetime.fromisoformat(snap["now"])
        write = self.stdout.write
        write(self.style.MIGRATE_HEADING("Needs attention"))
        attention = snap["attention"]
        for name, meaning in ATTENTION.items():
            n = attention[name]
            if name == "dead":
                meaning = f"{meaning}; {attention['dead_last_24h']} in the last 24 h"
            row = f"  {name:<12} {n:>8}   {meaning}"
            write(self.style.ERROR(row) if n else row)
        write(self.style.MIGRATE_HEADING("Wakes by state"))
        for state, n in snap["states"].items():
            write(f"  {state:<12} {n:>8}")
        write(f"  {'due now':<12} {snap['due_backlog']:>8}")
        if any(snap["tasks"].values()):
            write(self.style.MIGRATE_HEADING("Tasks (django.tasks) by state"))
            for state, n in snap["tasks"].items():
                write(f"  {state:<12} {n:>8}")
        oldest = snap["oldest_overdue"]
        if oldest is None:
            write("Oldest overdue: none")
        else:
            write(
                f"Oldest overdue: wake {oldest['id']} ({oldest['kind']}), due {since(oldest['due_at'], now)}"
                f" ({local_time(oldest['due_at'])})" + (f"; {oldest['held']}" if oldest["held"] else "")
            )
        next_due = snap["next_due_at"]
        write(f"Next due:       {'none' if next_due is None else f'{since(next_due, now)} ({local_time(next_due)})'}")
        if snap["limits"]:
            write(self.style.MIGRATE_HEADING(f"Limits ({len(snap['limits'])} in play)"))
            for row in snap["limits"]:
                key = row["key"] if row["scope"] == "key" else f"workspace {row['key']}"
                used = f"{row['in_use']:>5}/{row['size']:<5}"
                line = f"  {key:<24} {row['limit']:<18} {used} in use  {row['waiting']:>6} due"
                write(self.style.WARNING(f"{line}  held {row['held']}") if row["full"] else line)
        if snap["stopped_sessions"]:
            write(self.style.MIGRATE_HEADING(f"Stopped sessions ({len(snap['stopped_sessions'])} shown)"))
            for c in snap["stopped_sessions"]:
                session = f"{c['workspace_id']}/{c['session_id']}"
                write(f"  {session}  stopped {since(c['stopped_at'], now)}  {c['reason']}")
        write(self.style.MIGRATE_HEADING(f"Live runners ({len(snap['runners'])})"))
        for r in snap["runners"]:
            kinds = ", ".join(r["kinds"]) if r["kinds"] else "(not recorded)"
            write(
                f"  {r['id']}  host={r['host']} pid={r['pid']}  up {since(r['started_at'], now).removesuffix(' ago')}"
                f"  heartbeat {since(r['heartbeat_at'], now)}  kinds: {kinds}"
            )

    def _preview(
        self, *, cron: str | None, every: str | None, tz: str | None, n: int, start: str | None, dst: str | None
    ) -> None:
        from zoneinfo import ZoneInfo

        from django.conf import settings

        from django_wakes.schedules import recurrence

        try:
            begin = _start_moment(start, tz or settings.TIME_ZONE) if start is not None else None
            occurrences = recurrence.preview(cron=cron, every=every, tz=tz, n=n, start=begin, dst=dst)
        except InvalidWake as exc:
            raise CommandError(str(exc)) from exc
        zone = tz or settings.TIME_ZONE
        what = f"cron {cron!r}" if cron is not None else f"every {every}"
        write = self.stdout.write
        write(self.style.MIGRATE_HEADING(f"Next {len(occurrences)} fire times of {what} in {zone}"))
        if cron is not None:
            write(f"DST policy: {recurrence.dst_policy(dst).describe()}")
        local_width = len("Wed 2025-01-01 09:00:00 CEST")
        write(f"  {'#':>3}  {'local time':<{local_width}}  UTC")
        for number, occurrence in enumerate(occurrences, 1):
            for change in occurrence.changes:
                write(self.style.WARNING(f"  {'':>3}  DST {change}"))
            local = occurrence.local.astimezone(ZoneInfo(zone))
            line = (
                f"  {number:>3}  {local:%a %Y-%m-%d %H:%M:%S} {local.tzname():<5}  {occurrence.at:%Y-%m-%d %H:%M:%SZ}"
            )
            write(line + (f"  DST: {occurrence.note}" if occurrence.note else ""))


def _printable(value: Any) -> Any:
    """``value`` (the snapshot: dicts, lists, strings, numbers) with control characters in its strings escaped."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


def _start_moment(text: str, zone: str) -> datetime:
    """``--start``: an ISO date or date/time; a naive one is read in the preview's zone."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"--start: {text!r} is not an ISO date/time such as 2025-03-28T12:00") from exc
    if moment.tzinfo is None:
        try:
            moment = moment.replace(tzinfo=ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise CommandError(f"--tz: unknown time zone {zone!r}") from exc
    return moment
