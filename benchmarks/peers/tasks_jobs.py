"""The django-tasks-db peer: a no-op task, and ``python -m benchmarks.peers.tasks_jobs N`` to enqueue N."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

if importlib.util.find_spec("django.tasks") is not None:
    from django.tasks import task
else:
    from django_tasks import task


@task
def noop() -> None:
    """Do nothing (the same no-op as django-wakes' ``bench.noop`` sink)."""


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.peers.tasks_settings")
    import django

    django.setup()
    from django.db import connection, transaction
    from django_tasks_db.models import DBTaskResult

    n = int(sys.argv[1])
    table = DBTaskResult._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table}")
    t0 = time.perf_counter()
    # Import the task under its module name (not ``__main__``) so the worker can import it back.
    from benchmarks.peers.tasks_jobs import noop as task

    with transaction.atomic():
        for _ in range(n):
            task.enqueue()
    enqueue_s = time.perf_counter() - t0
    # Fresh statistics on the queue table, as every system in the benchmark gets after seeding.
    with connection.cursor() as cursor:  # autocommit: VACUUM cannot run inside a transaction
        cursor.execute(f"VACUUM ANALYZE {table}")
    print(json.dumps({"enqueued": n, "enqueue_s": enqueue_s, "table": table}))


if __name__ == "__main__":
    main()
