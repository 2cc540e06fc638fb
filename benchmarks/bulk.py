"""Bulk booking against the database's own bulk load, in one process, same run, same database.

Books ``--rows`` plain wakes (a delay, a kind, an intent each) with one ``schedule_many`` call, and
loads the very rows the call wrote into a plain table shaped like the wake table (same columns, no
index, no constraint) with the database's raw bulk path: ``COPY`` through psycopg's ``cursor.copy``
on PostgreSQL, multi-row ``INSERT``s of ``--chunk`` rows (``executemany``, which mysqlclient folds into
multi-row statements) on MariaDB. The ratio is what to read on a shared machine::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wakes_bench DJANGO_SETTINGS_MODULE=benchmarks.settings \\
        python -m benchmarks.bulk --rows 100000

The wake table is emptied before each round (``TRUNCATE``/``DELETE``); the best of ``--repeat`` rounds is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=1000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    from django.db import connection

    from django_wakes import schedule_many
    from django_wakes.models import Wake

    table = Wake._meta.db_table
    items = [{"delay": f"{3600 + i % 600}s", "intent": {"n": i}} for i in range(args.rows)]
    vendor = connection.vendor

    def empty(name: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {name}" + (" CASCADE" if vendor == "postgresql" else ""))  # noqa: S608

    if vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")  # TRUNCATE of a referenced table
    best_ours = float("inf")
    for _ in range(args.repeat):
        empty(table)
        began = time.perf_counter()
        schedule_many(items, workspace_id="bench-bulk", kind="bench.noop")
        best_ours = min(best_ours, time.perf_counter() - began)

    columns = [f.column for f in Wake._meta.concrete_fields if not f.primary_key]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")  # noqa: S608
        rows: list[tuple[Any, ...]] = [
            tuple(json.dumps(v) if isinstance(v, dict | list) else v for v in row) for row in cursor.fetchall()
        ]
        cursor.execute("DROP TABLE IF EXISTS bulk_plain")
        if vendor == "postgresql":
            cursor.execute(f"CREATE TABLE bulk_plain (LIKE {table} INCLUDING DEFAULTS)")
            cursor.execute("ALTER TABLE bulk_plain DROP COLUMN id")
        else:
            cursor.execute(f"CREATE TABLE bulk_plain AS SELECT {', '.join(columns)} FROM {table} LIMIT 0")  # noqa: S608
    best_raw = float("inf")
    for _ in range(args.repeat):
        empty("bulk_plain")
        began = time.perf_counter()
        with connection.cursor() as cursor:
            if vendor == "postgresql":
                with cursor.cursor.copy(f"COPY bulk_plain ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(columns))
                sql = f"INSERT INTO bulk_plain ({', '.join(columns)}) VALUES ({marks})"  # noqa: S608
                for start in range(0, len(rows), args.chunk):
                    cursor.executemany(sql, rows[start : start + args.chunk])
        connection.commit() if not connection.get_autocommit() else None
        best_raw = min(best_raw, time.perf_counter() - began)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bulk_plain")
    empty(table)
    ours, raw = args.rows / best_ours, args.rows / best_raw
    load = os.getloadavg()[0]
    print(
        f"{vendor}: schedule_many {args.rows:,} wakes {ours:,.0f}/s; raw bulk load into a plain table {raw:,.0f}/s; "
        f"ratio {ours / raw:.1%} (load average {load:.1f})"
    )


if __name__ == "__main__":
    main()
