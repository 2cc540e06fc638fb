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


def sync_periodic_on_boot() -> None:
    """Reconcile periodic tasks as ``runwakes`` starts; a failure is logged, never stops the runner.

    Nothing to do without a Tasks framework, nor when nothing is declared and no periodic chain is
    live (one read). A bad declaration is logged as an error, a database that stays away as a
    warning: the runner still serves everything else, and the next boot (or ``manage.py wakes
    sync-periodic``) tries again.
    """
    if not framework_available():
        return
    from .periodic_tasks import anything_to_sync, sync_periodic  # needs the framework: imported only with it

    try:
        report = sync_periodic() if anything_to_sync() else None
    except WakeError as exc:
        logger.error("periodic tasks were not synced: %s", exc)
        return
    except TRANSIENT_ERRORS as exc:
        logger.warning("periodic tasks were not synced (database unavailable: %s); the next boot tries again", exc)
        return
    if report is not None and report.changed:
        logger.info(
            "periodic tasks synced: booked=%s replanned=%s ended=%s kept=%d",
            ",".join(report.booked) or "-",
            ",".join(report.replanned) or "-",
            ",".join(report.ended) or "-",
            len(report.kept),
        )
