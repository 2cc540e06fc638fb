"""Seeding PostgreSQL benchmark tables in one statement: ``INSERT INTO <model> SELECT ... FROM generate_series``.

Shared by the console and dashboard benchmarks (``console_1m.py``, ``dashboard_1m.py``). The columns
are read off the model, so a field added to it later takes its default and needs no change here.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, models


def insert_select(
    model: type[models.Model],
    count: int,
    overrides: dict[str, str],
    params: Sequence[object] = (),
    source: str = "",
) -> None:
    """``INSERT INTO <model> SELECT ... FROM generate_series(1, count) g`` (or ``FROM source``).

    ``overrides`` maps field names to SQL over ``g`` (or over ``source``'s columns); their ``%s``
    placeholders take ``params``, in the order the fields come in the model. The primary key is left
    to the database unless overridden. Every other concrete field takes its model default (``NULL``
    where it has none and may be null). A ``%`` meant literally in an override is written ``%%``.
    """
    given = iter(params)
    columns, expressions, values = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key and field.name not in overrides:
            continue
        columns.append(connection.ops.quote_name(field.column))
        if field.name in overrides:
            expression = overrides[field.name]
            expressions.append(expression)
            values.extend(next(given) for _ in range(expression.count("%s")))
            continue
        default = field.get_default()
        if default is None:
            if not field.null:
                raise SystemExit(f"{model.__name__}.{field.name} needs a value in the benchmark's seeding")
            expressions.append("NULL")
        else:
            expressions.append("%s")
            values.append(field.get_db_prep_save(default, connection))
    table = connection.ops.quote_name(model._meta.db_table)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(expressions)} FROM "
    sql += source or f"generate_series(1, {count}) AS g"
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
