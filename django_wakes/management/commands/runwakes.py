"""``manage.py runwakes``: argument parsing and logging set-up around :class:`~django_wakes.runner.sweeper.Sweeper`."""

from __future__ import annotations

import argparse
import logging
import threading
import time
from datetime import timedelta
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError

from django_wakes.checks import setting_errors
from django_wakes.durations import parse_duration
from django_wakes.engine import TRANSIENT_ERRORS, db_alias
from django_wakes.engine.schema import not_migrated_message, unapplied_migrations
from django_wakes.engine.shared import ROLLBACK_TRIES
from django_wakes.exceptions import InvalidDuration
from django_wakes.runner import RunnerBroken, Sweeper, apply_client_timeouts, probe_sqlite_json_support
from django_wakes.tasks import sync_periodic_on_boot


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from exc
    if not number > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    if not number <= threading.TIMEOUT_MAX:  # also refuses inf: a sleep that long cannot be waited on
        raise argparse.ArgumentTypeError(f"must be at most {threading.TIMEOUT_MAX:.0f} seconds")
    return number


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from exc
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def duration(value: str) -> timedelta:
    try:
        return parse_duration(value, name="duration", allow_zero=False)
    except InvalidDuration as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def lane_list(value: str) -> list[str]:
    lanes = [lane.strip() for lane in value.split(",") if lane.strip()]
    if not lanes:
        raise argparse.ArgumentTypeError("needs at least one name")
    return lanes


class Command(BaseCommand):
    help = "Fire due wakes: recover lapsed leases, then run passes until SIGTERM/SIGINT."

    def execute(self, *args: Any, **options: Any) -> Any:
        probe_sqlite_json_support()  # before the system checks: a busy SQLite writer must not fail them
        return super().execute(*args, **options)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Run a single pass and exit; exit status 1 if any wake failed."
        )
        parser.add_argument(
            "--interval",
            type=positive_float,
            default=None,
            help="Longest sleep between passes in seconds: the polling backstop (WAKES['POLL_INTERVAL'], 1.0).",
        )
        parser.add_argument("--batch", type=positive_int, default=None, help="Wakes claimed per pass (WAKES['BATCH']).")
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            help="Lanes fired in parallel, each in its own thread and connection (default %(default)r).",
        )
        parser.add_argument("--lease", type=duration, default=None, help="Claim lease, e.g. 5m (WAKES['LEASE']).")
        parser.add_argument(
            "--no-listen", action="store_true", help="Do not LISTEN for push hints on PostgreSQL (poll only)."
        )
        parser.add_argument(
            "--gc-every",
            type=duration,
            default=timedelta(hours=1),
            help="How often to delete terminal wakes older than WAKES['GC_AFTER'] (default 1h).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=positive_float,
            default=30.0,
            help="Seconds to finish the wakes in hand after SIGTERM before exiting anyway (default %(default)r).",
        )
        parser.add_argument("--lanes", type=lane_list, default=None, help="Only fire these comma-separated lanes.")
        parser.add_argument(
            "--queues", type=lane_list, default=None, help="Only fire wakes of these comma-separated queues."
        )

    def handle(
        self,
        *args: Any,
        once: bool,
        interval: float | None,
        batch: int | None,
        concurrency: int,
        lease: timedelta | None,
        no_listen: bool,
        gc_every: timedelta,
        shutdown_timeout: float,
        lanes: list[str] | None,
        queues: list[str] | None,
        verbosity: int,
        **options: Any,
    ) -> None:
        logger = logging.getLogger("django_wakes")
        logger.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
        if not logger.handlers and not logging.getLogger().handlers:
            handler: logging.Handler = logging.StreamHandler(cast(TextIO, self.stderr._out))
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            logger.addHandler(handler)
        refused = setting_errors()  # also under --skip-checks: a runner never starts on settings it cannot honour
        if refused:
            raise CommandError("; ".join(f"({m.id}) {m.msg}" for m in refused), returncode=1)
        apply_client_timeouts()  # a partitioned runner notices within a bounded time
        refuse_unmigrated()
        # Periodic tasks (django_wakes.tasks): book, re-plan, end, once per boot; when the database is
        # not there yet, once it answers (after the runner's first pass that reaches it).
        synced = sync_periodic_on_boot()
        runner = Sweeper(
            interval=interval,
            batch=batch,
            concurrency=concurrency,
            lease=lease,
            listen=not no_listen,
            gc_every=gc_every,
            lanes=lanes,
            queues=queues,
            shutdown_timeout=shutdown_timeout,
            when_reachable=() if synced else (sync_periodic_on_boot,),
        )
        if once:
            try:
                report = runner.run_once(claim_tries=ROLLBACK_TRIES)  # no next pass: a locked claim is tried again here
            except TRANSIENT_ERRORS as exc:
                raise CommandError(
                    f"the pass did not complete: the database refused it ({type(exc).__name__}: {exc})", returncode=1
                ) from exc
            logger.info(
                "runner %s, one pass (--once): %s",
                runner.runner_id,
                report.summary(),
                extra={"runner_id": runner.runner_id},
            )
            if runner.failed:
                raise CommandError(f"{runner.failed} wake(s) failed in this pass", returncode=1)
            return
        runner.install_signal_handlers()
        started = time.monotonic()
        try:
            runner.run()
        except RunnerBroken as exc:  # a thread it cannot do without ended: exit for the supervisor to restart it
            raise CommandError(str(exc), returncode=1) from exc
        logger.info("%s", stopped_line(runner, time.monotonic() - started), extra={"runner_id": runner.runner_id})


def refuse_unmigrated() -> None:
    """Stop before the first pass when django-wakes' tables are missing or behind: one line naming ``migrate``.

    A database that cannot be asked now is not refused: the runner meets that outage as any other.
    """
    alias = db_alias()
    missing = unapplied_migrations(alias)
    if missing:
        raise CommandError(not_migrated_message(alias, missing), returncode=1)


def stopped_line(runner: Sweeper, seconds: float) -> str:
    """The last line of a runner stopped by a signal: what it did in its life."""
    totals = runner.totals
    return (
        f"runwakes stopped: fired {totals.fired}, failed {totals.failed}, dead {totals.dead}, "
        f"expired {totals.expired}, deferred {totals.deferred} (runner {runner.runner_id}, up {seconds:.0f}s)"
    )
