"""What ``runwakes`` does for tasks as it starts: reconcile periodic tasks, if a Tasks framework is there.

Importable without a Tasks framework (Django 5.2 without the ``[tasks]`` extra): the modules that
need one are imported only once :func:`~django_wakes.tasks.kind.framework_available` says so.
"""

from __future__ import annotations

import logging

from ..engine import TRANSIENT_ERRORS
from ..exceptions import WakeError
from .kind import framework_available

logger = logging.getLogger("django_wakes")


def sync_periodic_on_boot() -> bool:
    """Reconcile periodic tasks as ``runwakes`` starts; a failure is logged, never stops the runner.

    Return whether it is done: True when synced (or nothing to do, or a bad declaration that only a
    deploy can fix, logged as an error), False when the database could not be reached (logged as a
    warning): the runner then calls it again after its first pass that reaches the database, so a
    runner that boots during an outage still books its periodic tasks once the database is back.

    Nothing to do without a Tasks framework, nor when nothing is declared and no periodic chain is
    live (one read).
    """
    if not framework_available():
        return True
    from .periodic_tasks import anything_to_sync, sync_periodic  # needs the framework: imported only with it

    try:
        report = sync_periodic() if anything_to_sync() else None
    except WakeError as exc:
        logger.error("periodic tasks were not synced: %s", exc)
        return True
    except TRANSIENT_ERRORS as exc:
        logger.warning(
            "periodic tasks were not synced (database unavailable: %s); trying again once the database answers", exc
        )
        return False
    if report is not None and report.changed:
        logger.info(
            "periodic tasks synced: booked=%s replanned=%s ended=%s kept=%d",
            ",".join(report.booked) or "-",
            ",".join(report.replanned) or "-",
            ",".join(report.ended) or "-",
            len(report.kept),
        )
    return True
