"""``manage.py runwakes``: argument parsing and logging set-up around :class:`~django_wakes.runner.Runner`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_wakes.runner import Runner


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from exc
    if not number > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return number


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from exc
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


class Command(BaseCommand):
    help = "Fire due wakes: recover lapsed leases, then run passes until SIGTERM/SIGINT."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="Run a single pass and exit.")
        parser.add_argument(
            "--interval", type=positive_float, default=1.0,
            help="Longest sleep between passes, in seconds (default %(default)r).",
        )
        parser.add_argument(
            "--batch", type=positive_int, default=None, help="Wakes claimed per pass (default WAKES['BATCH'])."
        )
        parser.add_argument(
            "--lanes", default=None, help="Only fire wakes of these comma-separated serial keys."
        )

    def handle(self, *args: Any, once: bool, interval: float, batch: int | None, lanes: str | None,
               verbosity: int, **options: Any) -> None:
        level = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}[verbosity]
        logger = logging.getLogger("django_wakes")
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(self.stderr._out)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            logger.addHandler(handler)
        lane_list = [lane.strip() for lane in lanes.split(",") if lane.strip()] if lanes else None
        if lanes is not None and not lane_list:
            raise CommandError("--lanes needs at least one serial key")
        runner = Runner(interval=interval, batch=batch, lanes=lane_list)
        if once:
            runner.run_once()
            if runner.failed:
                raise CommandError(f"{runner.failed} wake(s) failed in this pass", returncode=1)
            return
        runner.install_signal_handlers()
        runner.run()
