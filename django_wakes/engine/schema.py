"""Whether a database holds the tables the engine writes: django-wakes' migrations, applied or not.

``runwakes`` (and ``wakes status``/``gc``/``sync-periodic``) ask before they start, so a runner started
before ``manage.py migrate`` says so in one line instead of a traceback ending in ``relation
"django_wakes_runner" does not exist`` (or, on SQLite, retrying "no such table" for ever); the system
check ``django_wakes.E016`` asks the same under ``manage.py check --database <alias>``.
"""

from __future__ import annotations

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

APP_LABEL = "django_wakes"


def unapplied_migrations(alias: str) -> list[str] | None:
    """The names of django-wakes' migrations not applied on ``alias``, oldest first.

    ``[]``: the schema is current. ``None``: the database could not be asked (it is down, or refused
    the read): the caller goes on, and meets the outage the way it meets any other (a runner retries).
    A squashed migration counts as applied when everything it replaces is, as ``migrate`` reads it.
    """
    connection = connections[alias]
    try:
        executor = MigrationExecutor(connection)
        targets = executor.loader.graph.leaf_nodes(APP_LABEL)
        plan = executor.migration_plan(targets)
    except DatabaseError:
        return None
    return [migration.name for migration, backwards in plan if migration.app_label == APP_LABEL and not backwards]


def not_migrated_message(alias: str, missing: list[str]) -> str:
    """One line saying what is missing and the command that fixes it."""
    if len(missing) == 1:
        what = f"migration {APP_LABEL}.{missing[0]} is"
    else:
        what = f"{len(missing)} migrations of {APP_LABEL} ({missing[0]} … {missing[-1]}) are"
    database = "" if alias == "default" else f" --database {alias}"
    return f"{what} not applied on database {alias!r}: run `python manage.py migrate{database}` first"
