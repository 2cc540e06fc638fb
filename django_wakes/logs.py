"""Log records as data: every record of the ``django_wakes`` logger carries the wake and the runner.

Each record gets five attributes, so a JSON formatter emits them as fields and a plain format string
may name them (``%(wake_id)s``): ``wake_id``, ``kind``, ``lane``, ``workspace_id`` (``None`` when the
record is about no one wake) and ``runner_id`` (``None`` outside a runner).

Where they come from, cheapest first:

* a call site about one wake passes ``extra=about(wake, runner_id)``;
* otherwise the filter below (on the ``django_wakes`` logger, so it runs only for records that pass
  the level check: a disabled level costs nothing) reads the wake whose sink is running in this
  context (:data:`firing_wake`) and the runner this thread works for (:data:`current_runner`).

:class:`WakeFields` may also be put on a handler, so records of *other* loggers written while a sink
runs (the sink's own, an HTTP client's) carry the wake too.

The filter also escapes control and format characters (:mod:`django_wakes.text`) in the message and
in those attributes, so an identifier holding a line feed or an ESC (a row older than the refusal of
such identifiers, or written by raw SQL) cannot forge a log line or reach a terminal, in a plain
format and a JSON one alike. A record whose message has none keeps its ``msg`` and ``args`` (error
trackers group by the template).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .text import control_character, printable

if TYPE_CHECKING:
    from .models import Wake

logger = logging.getLogger("django_wakes")

#: The attributes every record of the ``django_wakes`` logger carries.
FIELDS = ("wake_id", "kind", "lane", "workspace_id", "runner_id")
WAKE_FIELDS = FIELDS[:4]

#: The wake whose sink is running in this context (thread or task): a wake created meanwhile is one deeper.
firing_wake: ContextVar[Wake | None] = ContextVar("django_wakes_firing_wake", default=None)
#: The runner this thread (or task) works for; set by the runner's threads for their whole life.
current_runner: ContextVar[str | None] = ContextVar("django_wakes_current_runner", default=None)


def about(wake: Wake, runner_id: str | None = None) -> dict[str, Any]:
    """The ``extra`` of a record about ``wake`` (``runner_id`` defaults to this thread's runner)."""
    return {
        "wake_id": wake.pk,
        "kind": wake.kind,
        "lane": wake.serial_key,
        "workspace_id": wake.workspace_id,
        "runner_id": runner_id if runner_id is not None else current_runner.get(),
    }


@contextmanager
def running_as(runner_id: str) -> Iterator[None]:
    """Mark every record logged in this context (a runner's thread) with ``runner_id``."""
    token = current_runner.set(runner_id)
    try:
        yield
    finally:
        current_runner.reset(token)


class WakeFields(logging.Filter):
    """Give a record the :data:`FIELDS` it lacks, from the firing wake and the current runner."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = record.__dict__
        if "wake_id" not in fields:
            wake = firing_wake.get()
            if wake is None:
                for name in WAKE_FIELDS:
                    fields.setdefault(name, None)
            else:
                fields.setdefault("wake_id", wake.pk)
                fields.setdefault("kind", wake.kind)
                fields.setdefault("lane", wake.serial_key)
                fields.setdefault("workspace_id", wake.workspace_id)
        if fields.get("runner_id") is None:
            fields["runner_id"] = current_runner.get()
        _escape_controls(record)
        return True


def _escape_controls(record: logging.LogRecord) -> None:
    """Escape control characters in the record's message and :data:`FIELDS` (left as they are when it has none)."""
    fields = record.__dict__
    for name in FIELDS:
        value = fields.get(name)
        if isinstance(value, str):
            fields[name] = printable(value)
    if not record.args and isinstance(record.msg, str) and control_character(record.msg) is None:
        return
    try:
        message = record.getMessage()
    except (TypeError, ValueError, KeyError):  # a bad format: logging reports it when the handler formats
        return
    if control_character(message) is not None:
        record.msg, record.args = printable(message), None


if not any(isinstance(existing, WakeFields) for existing in logger.filters):
    logger.addFilter(WakeFields())
