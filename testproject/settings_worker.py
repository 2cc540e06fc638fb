"""A worker-only settings module: the testproject's, without ``ROOT_URLCONF`` (Django's checks allow that).

A host that runs ``runwakes`` from settings of its own, with no URLs to serve, looks like this;
``tests/test_checks.py`` runs ``check``, ``migrate`` and ``runwakes --once`` with it.
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403

del ROOT_URLCONF  # noqa: F821
# Approvals are answered through the web processes' settings: a worker needs no AUTHORIZE.
WAKES = {key: value for key, value in WAKES.items() if key != "AUTHORIZE"}  # noqa: F405
