"""Django's admin autodiscovery imports ``<app>.admin``: the operator console lives in :mod:`django_wakes.console`."""

from __future__ import annotations

from .console import admin  # noqa: F401  (registers the console's ModelAdmins with the default site)
