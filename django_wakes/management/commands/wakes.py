"""``manage.py wakes status|gc|preview``: the wake table, on-demand clean-up, a schedule's next fire times."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Min

from django_wakes import clock, engine
from django_wakes.conf import wakes_settings
from django_wakes.durations import parse_duration
from django_wakes.exceptions import InvalidDuration, InvalidWake
from django_wakes.models import Runner, SessionControl, State, Wake
from django_wakes.tasks import TASK_KIND

#: ``wakes status`` lists at most this many stopped sessions (newest first).
STOPPED_SHOWN = 20


def status_snapshot() -> dict[str, Any]:
    """Return counts per state, the due backlog, the oldest overdue and next due wake, live runners."""
    now = clock.now()
    wakes = Wake.objects.using(engine.db_alias())
    counts = {state: 0 for state in State.values}
    for row in wakes.values("state").annotate(n=Count("id")).order_by():
        counts[row["state"]] = row["n"]
    tasks = {state: 0 for state in State.values}  # Django Tasks run by django_wakes.tasks.WakesBackend
    for row in wakes.filter(kind=TASK_KIND).values("state").annotate(n=Count("id")).order_by():
        tasks[row["state"]] = row["n"]
    due = wakes.due(now)
    oldest = due.order_by("due_at", "id").values("id", "kind", "serial_key", "due_at").first()
    oldest_due: datetime | None = oldest["due_at"] if oldest is not None else None
    next_due = wakes.pending().filter(due_at__gt=now).aggregate(m=Min("due_at"))["m"]
    live = Runner.objects.using(engine.db_alias()).live(now)
    return {
        "now": now.isoformat(),
        "states": counts,
        "tasks": tasks,
        "due_backlog": due.count(),
        "oldest_overdue": None
        if oldest is None or oldest_due is None
        else {
            "id": oldest["id"],
            "kind": oldest["kind"],
            "lane": oldest["serial_key"],
            "due_at": oldest_due.isoformat(),
            "late_seconds": round((now - oldest_due).total_seconds(), 3),
        },
        "next_due_at": next_due.isoformat() if next_due else None,
        "stopped_sessions": [
            {"session_id": c.session_id, "stopped_at": c.stopped_at.isoformat(), "reason": c.stop_reason}
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
                "started_at": r.started_at.isoformat(),
                "heartbeat_at": r.heartbeat_at.isoformat(),
            }
            for r in live.order_by("started_at")
        ],
    }


class Command(BaseCommand):
    help = "Inspect the wake table (status) or delete old terminal wakes (gc)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        status = sub.add_parser("status", help="Counts per state, due backlog, oldest overdue, next due, runners.")
        status.add_argument("--json", action="store_true", help="Print JSON for scripts.")
        gc = sub.add_parser("gc", help="Delete terminal wakes older than --older-than (WAKES['GC_AFTER']).")
        gc.add_argument("--older-than", default=None, help="A duration such as 30d (default WAKES['GC_AFTER']).")
        sub.add_parser(
            "sync-periodic", help="Book, re-plan and end periodic tasks' chains to match the declarations (idempotent)."
        )
        preview = sub.add_parser(
            "preview", help="The next fire times of a cron or every schedule, in local time and UTC, DST marked."
        )
        preview.add_argument("cron", nargs="?", default=None, help='A cron expression, e.g. "0 9 * * MON-FRI".')
        preview.add_argument("--every", default=None, help="An interval instead of cron, e.g. 90m.")
        preview.add_argument("--tz", default=None, help="The IANA zone (default settings.TIME_ZONE).")
        preview.add_argument("-n", type=int, default=10, help="How many fire times (default %(default)r).")
        preview.add_argument(
            "--start", default=None, help="ISO date/time to start after (naive: in --tz; default now)."
        )
        preview.add_argument("--dst", default=None, help="DST policy, e.g. ambiguous=both,missing=skip (cron only).")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "gc":
            self._gc(options["older_than"])
        elif action == "sync-periodic":
            self._sync_periodic()
        elif action == "preview":
            self._preview(
                cron=options["cron"],
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
                self.stdout.write(f"{label}: {name}")
        self.stdout.write(
            f"periodic tasks: {len(report.booked)} booked, {len(report.replanned)} re-planned, "
            f"{len(report.ended)} ended, {len(report.kept)} unchanged"
        )

    def _status(self, *, as_json: bool) -> None:
        snap = status_snapshot()
        if as_json:
            self.stdout.write(json.dumps(snap, indent=2))
            return
        write = self.stdout.write
        write(self.style.MIGRATE_HEADING("Wakes by state"))
        for state, n in snap["states"].items():
            write(f"  {state:<10} {n:>10}")
        write(f"  {'due now':<10} {snap['due_backlog']:>10}")
        if any(snap["tasks"].values()):
            write(self.style.MIGRATE_HEADING("Tasks (django.tasks) by state"))
            for state, n in snap["tasks"].items():
                write(f"  {state:<10} {n:>10}")
        oldest = snap["oldest_overdue"]
        write(
            "Oldest overdue: "
            + ("none" if oldest is None else f"wake {oldest['id']} ({oldest['kind']}), {oldest['late_seconds']}s late")
        )
        write(f"Next due:       {snap['next_due_at'] or 'none'}")
        if snap["stopped_sessions"]:
            write(self.style.MIGRATE_HEADING(f"Stopped sessions ({len(snap['stopped_sessions'])} shown)"))
            for c in snap["stopped_sessions"]:
                write(f"  {c['session_id']}  since {c['stopped_at']}  {c['reason']}")
        write(self.style.MIGRATE_HEADING(f"Live runners ({len(snap['runners'])})"))
        for r in snap["runners"]:
            write(f"  {r['id']}  host={r['host']} pid={r['pid']} heartbeat={r['heartbeat_at']}")

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
