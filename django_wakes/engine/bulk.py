"""Inserting many plain wakes at the database's bulk speed: what :func:`~.create.schedule_many` writes.

``bulk_create`` builds a model instance per row and prepares every one of the wake's ~50 columns per
row; for a plain wake most columns hold the same default in every row. Here the columns are split
once per call: those no row sets are prepared once, and only the ~10 an item sets (kind, intent,
fire_at, …) are prepared per row. The rows go out as tuples:

* PostgreSQL: ids are drawn from the table's sequence in one statement, then the rows are loaded
  with ``COPY`` (psycopg's ``cursor.copy``), in the caller's transaction;
* elsewhere: multi-row ``INSERT … RETURNING id`` of as many rows as the database takes in one
  statement (``bulk_batch_size``), or ``bulk_create`` where the database cannot return ids.

The wakes handed back are built without ``Model.__init__`` (their attributes set directly, as
``Model.from_db`` would from a row), marked saved on ``using``.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models.base import ModelState

from ..conf import wakes_settings
from ..models import Wake

#: Rows per multi-row ``INSERT`` where there is no ``COPY`` (fewer where the database limits parameters).
INSERT_ROWS = 1000


def insert_plain_many(using: str, rows: list[dict[str, Any]], now: datetime) -> list[Wake]:
    """Insert one wake per ``rows`` item (the fields :func:`~.create._schedule_fields` validated); return them.

    Every row must be a plain insert: no coalescing slot, budget, or idempotency key already taken
    (the caller decided that). Runs in the caller's transaction.
    """
    if not rows:
        return []
    connection = connections[using]
    fields = [f for f in Wake._meta.concrete_fields if not f.primary_key]
    base: dict[str, Any] = {"max_attempts": wakes_settings.max_attempts, "coalesce_key": None}
    base.update(created_at=now, updated_at=now)
    # The columns whose value differs between rows; one an item sets alike in every row is a constant.
    first = rows[0]
    given = {name for row in rows for name in row if name not in first}
    given.update(name for name, value in first.items() if any(_differs(row, name, value) for row in rows))
    # A column no row sets holds one value in every row: prepared once. The others, per row, with this default.
    defaults = {f.name: base[f.name] if f.name in base else f.get_default() for f in fields}
    varying = [f.name for f in fields if f.name in given]
    for name, value in first.items():
        if name not in given:
            defaults[name] = value
    constants = {name: value for name, value in defaults.items() if name not in given}
    rows = [{name: row.get(name, defaults[name]) for name in varying} for row in rows]
    if connection.vendor == "postgresql":
        return _copy(using, connection, fields, varying, constants, rows)
    if not connection.features.can_return_rows_from_bulk_insert:
        return _bulk_create(using, rows, constants)
    return _insert_returning(using, connection, fields, varying, constants, rows)


def _differs(row: dict[str, Any], name: str, value: Any) -> bool:
    if name not in row:
        return True
    other = row[name]
    return other is not value and (type(other) is not type(value) or other != value)


def _instances(
    using: str, fields: list[Any], varying: list[str], constants: dict[str, Any], rows: list[dict[str, Any]]
) -> list[Wake]:
    """The wakes of ``rows`` as saved instances, without ``Model.__init__`` (ids set by the caller)."""
    common = {by.attname: constants[by.name] for by in fields if by.name in constants}
    # A dict or list constant (an empty result, say) is copied per wake: no two wakes share one object.
    mutable = {name: value for name, value in common.items() if isinstance(value, dict | list)}
    attnames = {by.name: by.attname for by in fields}
    wakes = []
    for row in rows:
        wake = Wake.__new__(Wake)
        state = ModelState()
        state.adding, state.db = False, using
        values = wake.__dict__
        values.update(common)
        for name, value in mutable.items():
            values[name] = copy.deepcopy(value)
        for name, value in row.items():
            values[attnames.get(name, name)] = value
        values["_state"] = state
        wakes.append(wake)
    return wakes


def _prepared(connection: Any, fields: list[Any], varying: list[str], constants: dict[str, Any]) -> list[Any]:
    """Per column, in ``fields`` order: a prepared constant, or the field to prepare each row's value with."""
    columns: list[Any] = []
    for field in fields:
        if field.name in constants:
            columns.append(_Constant(field.get_db_prep_save(constants[field.name], connection)))
        else:
            columns.append(field)
    return columns


class _Constant:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _tuples(connection: Any, columns: list[Any], rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each row as the tuple of its prepared column values (every varying column is in every row).

    The constants are laid out once; per row only the varying columns are prepared. An aware
    datetime needs no preparing on PostgreSQL (Django's would hand it back as it is).
    """
    template = [column.value if isinstance(column, _Constant) else None for column in columns]
    varying = [(n, column) for n, column in enumerate(columns) if not isinstance(column, _Constant)]
    as_is = connection.vendor == "postgresql"
    out = []
    for row in rows:
        values = template.copy()
        for n, field in varying:
            value = row[field.name]
            if as_is and isinstance(value, datetime) and value.utcoffset() is not None:
                values[n] = value
            else:
                values[n] = field.get_db_prep_save(value, connection)
        out.append(tuple(values))
    return out


def _copy(
    using: str,
    connection: Any,
    fields: list[Any],
    varying: list[str],
    constants: dict[str, Any],
    rows: list[dict[str, Any]],
) -> list[Wake]:
    table = connection.ops.quote_name(Wake._meta.db_table)
    pk = Wake._meta.pk
    assert pk is not None
    names = ", ".join(connection.ops.quote_name(f.column) for f in [pk, *fields])
    tuples = _tuples(connection, _prepared(connection, fields, varying, constants), rows)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [Wake._meta.db_table, pk.column, len(rows)],
        )
        ids = [row[0] for row in cursor.fetchall()]
        # psycopg's own cursor, under Django's error wrapper: a duplicate idempotency key must be
        # Django's IntegrityError (the caller's retry reads the winner) and a deadlock its OperationalError.
        with connection.wrap_database_errors, cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:  # noqa: S608
            for pk_value, values in zip(ids, tuples, strict=True):
                copy.write_row((pk_value, *values))
    wakes = _instances(using, fields, varying, constants, rows)
    for wake, pk_value in zip(wakes, ids, strict=True):
        wake.__dict__["id"] = pk_value
    return wakes


def _insert_returning(
    using: str,
    connection: Any,
    fields: list[Any],
    varying: list[str],
    constants: dict[str, Any],
    rows: list[dict[str, Any]],
) -> list[Wake]:
    table = connection.ops.quote_name(Wake._meta.db_table)
    pk = Wake._meta.pk
    assert pk is not None
    names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    tuples = _tuples(connection, _prepared(connection, fields, varying, constants), rows)
    chunk = max(1, min(INSERT_ROWS, connection.ops.bulk_batch_size(fields, tuples) or INSERT_ROWS))
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(tuples), chunk):
            part = tuples[start : start + chunk]
            sql = (
                f"INSERT INTO {table} ({names}) VALUES {', '.join([one] * len(part))} "  # noqa: S608 - quoted names
                f"RETURNING {connection.ops.quote_name(pk.column)}"
            )
            cursor.execute(sql, [value for values in part for value in values])
            ids.extend(row[0] for row in cursor.fetchall())
    wakes = _instances(using, fields, varying, constants, rows)
    for wake, pk_value in zip(wakes, ids, strict=True):
        wake.__dict__["id"] = pk_value
    return wakes


def _bulk_create(using: str, rows: list[dict[str, Any]], constants: dict[str, Any]) -> list[Wake]:
    wakes = [Wake(**{**constants, **row}) for row in rows]
    return Wake.objects.db_manager(using).bulk_create(wakes, batch_size=INSERT_ROWS)
