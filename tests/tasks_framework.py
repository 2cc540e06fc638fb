"""The Tasks framework the ``test_tasks*`` modules need: skip cleanly without one, except in CI.

``make test`` installs the ``django-tasks`` backport on Django 5.2 (Django 6 ships ``django.tasks``),
so under ``CI=true`` a missing framework is a broken install, reported as a failure, not a skip.
"""

from __future__ import annotations

import os

import pytest


def no_tasks_framework() -> None:
    """Skip the calling test module, which needs a Tasks framework (fail instead under CI)."""
    message = "neither django.tasks (Django 6) nor the django-tasks backport (pip install 'django-wakes[tasks]')"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} is installed: make test installs it", pytrace=False)
    pytest.skip(f"{message} is installed", allow_module_level=True)
