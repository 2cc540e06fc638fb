"""Standard-API task throughput: ``Task.enqueue()`` → finished, through ``runwakes`` and through django-tasks-db.

Run it in the benchmark's virtualenv (``make bench`` builds ``benchmarks/.env``, with django-tasks-db
and, on Django 5.2, the django-tasks backport)::

    benchmarks/.env/bin/python -m benchmarks.tasks_api

Both sides run the same code: one no-op ``@task`` (:func:`noop`, defined below), enqueued N times with
``noop.enqueue()`` inside one transaction by a Django process, then drained by real worker processes
that the orchestrator starts and times until the last task is finished. The backend is the only
difference: ``django_wakes.tasks.WakesBackend`` (settings ``benchmarks.settings``: the testproject's
``TASKS``) with ``manage.py runwakes``, or ``django_tasks_db.DatabaseBackend`` (settings
``benchmarks.peers.tasks_settings``) with ``manage.py db_worker``. Each at its best:

- persistent connections on both (``CONN_MAX_AGE = None``);
- ``VACUUM ANALYZE`` of the queue tables after seeding, so neither plans its claim query on stale
  statistics;
- ``db_worker --no-startup-delay`` (its default start is a random sleep of up to 1 s); both at their
  default polling and logging (one INFO line per task on both);
- one worker process, then two (the machine has 2 cores), on each side.

Each database is PostgreSQL, created (and dropped) by this script: ``wakes_bench_tasks_api`` and
``wakes_bench_tasks_api_db`` on ``BENCH_PG`` (default ``postgres://postgres@127.0.0.1:5432``, a
superuser). Knobs: ``BENCH_TASKS_N`` (default 5,000 tasks per run), ``BENCH_TASKS_WORKERS`` (``1,2``),
``BENCH_TIMEOUT`` (600 s per drain). The figure is N / (seconds from launching the workers to the last
task finished), so it includes process start-up on both sides; the rate between the first start and
the last finish recorded in the rows is printed too. After each run every task is checked to have
succeeded exactly once (its status, and on django-wakes its attempt rows).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
N = int(os.environ.get("BENCH_TASKS_N", "5000"))
#: Tasks enqueued one per transaction (autocommit, as a view would) to time ``enqueue()`` alone.
AUTOCOMMIT_N = int(os.environ.get("BENCH_TASKS_AUTOCOMMIT_N", "3000"))
WORKERS = [int(w) for w in os.environ.get("BENCH_TASKS_WORKERS", "1,2").split(",") if w.strip()]
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT", "600"))
LOGS = ROOT / "benchmarks" / ".env" / "logs"

WAKES_DB = "wakes_bench_tasks_api"
TASKS_DB = "wakes_bench_tasks_api_db"
WAKES_SETTINGS = "benchmarks.settings"
TASKS_SETTINGS = "benchmarks.peers.tasks_settings"
WAKES_TABLES = ("django_wakes_wake", "django_wakes_wakeattempt")
TASKS_TABLE = "django_tasks_database_dbtaskresult"  # DBTaskResult._meta.db_table


def noop() -> None:
    """Do nothing: the task both backends run (a ``Task`` once Django is set up, see below)."""


if settings.configured:  # in the Django processes: the same function, as a task of the configured backend
    try:
        from django.tasks import task
    except ImportError:  # Django 5.2: the django-tasks backport
        from django_tasks import task
    noop = task(noop)  # type: ignore[assignment]


# --------------------------------------------------------------------------------------------------
# Steps run inside a Django process: python -m benchmarks.tasks_api enqueue N
# --------------------------------------------------------------------------------------------------


def enqueue(n: int) -> dict[str, Any]:
    """Enqueue ``n`` no-op tasks through the standard API in one transaction, then VACUUM ANALYZE."""
    import django

    django.setup()
    from django.db import connection, transaction

    from benchmarks.tasks_api import noop as task_  # under its module name, so workers import it back

    backend = type(task_.get_backend()).__name__
    tables = WAKES_TABLES if backend == "WakesBackend" else (TASKS_TABLE,)
    for _ in range(min(AUTOCOMMIT_N, 200)):  # warm-up: connection, imports, caches
        task_.enqueue()
    started = time.perf_counter()
    for _ in range(AUTOCOMMIT_N):  # autocommit: each enqueue() is its own transaction, as in a view
        task_.enqueue()
    autocommit_s = time.perf_counter() - started
    with connection.cursor() as cursor:  # only the tasks enqueued below are drained
        cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
    started = time.perf_counter()
    with transaction.atomic():
        for _ in range(n):
            task_.enqueue()
    enqueue_s = time.perf_counter() - started
    with connection.cursor() as cursor:  # autocommit: VACUUM cannot run inside a transaction
        for table in tables:
            cursor.execute(f"VACUUM ANALYZE {table}")
    return {"backend": backend, "enqueued": n, "enqueue_s": enqueue_s, "autocommit_per_s": AUTOCOMMIT_N / autocommit_s}


# --------------------------------------------------------------------------------------------------
# The orchestrator
# --------------------------------------------------------------------------------------------------


def pg(dbname: str = "postgres") -> Any:
    import psycopg

    return psycopg.connect(f"{PG}/{dbname}", autocommit=True)


def recreate(dbname: str) -> None:
    with pg() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')


def drop(dbname: str) -> None:
    with pg() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def env(dbname: str, settings_module: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": f"{PG}/{dbname}",
        "DJANGO_SETTINGS_MODULE": settings_module,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }


def django_step(dbname: str, settings_module: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [PY, "-m", "benchmarks.tasks_api", *args],
        cwd=ROOT,
        env=env(dbname, settings_module),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"step {args} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def migrate(dbname: str, settings_module: str) -> None:
    subprocess.run(
        [PY, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env(dbname, settings_module),
        check=True,
    )


def finished_count(dbname: str, side: str) -> int:
    query = (
        "SELECT count(*) FROM django_wakes_wake WHERE state = 'fired'"
        if side == "wakes"
        else f"SELECT count(*) FROM {TASKS_TABLE} WHERE status = 'SUCCESSFUL'"
    )
    with pg(dbname) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def drain(dbname: str, side: str, workers: int) -> float:
    """Start ``workers`` worker processes; return the seconds until all N tasks are finished."""
    LOGS.mkdir(parents=True, exist_ok=True)
    if side == "wakes":
        command = [PY, "manage.py", "runwakes"]
        settings_module = WAKES_SETTINGS
    else:
        command = [PY, "manage.py", "db_worker", "--no-startup-delay"]
        settings_module = TASKS_SETTINGS
    procs = []
    started = time.perf_counter()
    for w in range(workers):
        log = (LOGS / f"tasks_api-{side}-{workers}-{w}.log").open("wb")
        procs.append(
            subprocess.Popen(command, cwd=ROOT, env=env(dbname, settings_module), stdout=log, stderr=subprocess.STDOUT)
        )
    try:
        while True:
            if finished_count(dbname, side) >= N:
                return time.perf_counter() - started
            if time.perf_counter() - started > TIMEOUT:
                raise SystemExit(f"{side}: not drained after {TIMEOUT:.0f}s")
            for proc in procs:
                if proc.poll() is not None:
                    raise SystemExit(f"{side}: a worker exited with {proc.returncode} (see {LOGS})")
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def check_and_span(dbname: str, side: str) -> float:
    """Check every task succeeded exactly once; return the span first start → last finish (seconds)."""
    with pg(dbname) as conn:
        if side == "wakes":
            states = dict(conn.execute("SELECT state, count(*) FROM django_wakes_wake GROUP BY state").fetchall())
            attempts = conn.execute(
                "SELECT count(*), count(DISTINCT wake_id), sum(CASE WHEN outcome = 'fired' THEN 1 ELSE 0 END) "
                "FROM django_wakes_wakeattempt"
            ).fetchone()
            if states != {"fired": N} or attempts != (N, N, N):
                raise SystemExit(f"wakes: expected {N} tasks fired once each, got {states}, attempts {attempts}")
            span = conn.execute(
                "SELECT extract(epoch FROM max(settled_at) - min(claimed_at)) FROM django_wakes_wake"
            ).fetchone()
        else:
            statuses = dict(conn.execute(f"SELECT status, count(*) FROM {TASKS_TABLE} GROUP BY status").fetchall())
            runs = conn.execute(
                f"SELECT count(*) FROM {TASKS_TABLE} WHERE jsonb_array_length(worker_ids) <> 1"
            ).fetchone()
            if statuses != {"SUCCESSFUL": N} or runs != (0,):
                raise SystemExit(f"django-tasks-db: expected {N} tasks successful once each, got {statuses}")
            span = conn.execute(
                f"SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM {TASKS_TABLE}"
            ).fetchone()
    return float(span[0]) if span and span[0] else float("nan")


def run_side(side: str, workers: int) -> dict[str, Any]:
    dbname, settings_module = (WAKES_DB, WAKES_SETTINGS) if side == "wakes" else (TASKS_DB, TASKS_SETTINGS)
    recreate(dbname)
    migrate(dbname, settings_module)
    seeded = django_step(dbname, settings_module, "enqueue", str(N))
    seconds = drain(dbname, side, workers)
    span = check_and_span(dbname, side)
    drop(dbname)
    return {
        "side": side,
        "workers": workers,
        "enqueue_per_s": N / seeded["enqueue_s"],
        "enqueue_autocommit_per_s": seeded["autocommit_per_s"],
        "finished_per_s": N / seconds,
        "in_rows_per_s": N / span if span == span and span > 0 else float("nan"),
        "seconds": seconds,
    }


def main() -> None:
    import django

    load = os.getloadavg()
    print(f"Standard-API tasks: {N} no-op tasks, enqueue() in one transaction, then drained on PostgreSQL")
    print(f"Python {sys.version.split()[0]}, Django {django.get_version()}, {os.cpu_count()} CPUs, load {load[0]:.2f}")
    rows = []
    for workers in WORKERS:
        for side in ("wakes", "tasks-db"):
            row = run_side(side, workers)
            rows.append(row)
            print(
                f"  {side:<9} {workers} worker(s): enqueue {row['enqueue_autocommit_per_s']:>6,.0f}/s autocommit, "
                f"{row['enqueue_per_s']:>6,.0f}/s in one transaction   "
                f"enqueue→finished {row['finished_per_s']:>7,.0f}/s ({row['seconds']:.2f}s)   "
                f"in rows {row['in_rows_per_s']:>7,.0f}/s",
                flush=True,
            )
    print("Ratios (django-wakes / django-tasks-db, enqueue→finished):")
    for workers in WORKERS:
        ours = next(r for r in rows if r["side"] == "wakes" and r["workers"] == workers)
        peer = next(r for r in rows if r["side"] == "tasks-db" and r["workers"] == workers)
        print(
            f"  {workers} worker(s): {ours['finished_per_s'] / peer['finished_per_s']:.2f}x "
            f"(enqueue {ours['enqueue_autocommit_per_s'] / peer['enqueue_autocommit_per_s']:.2f}x autocommit, "
            f"{ours['enqueue_per_s'] / peer['enqueue_per_s']:.2f}x in one transaction)"
        )
    load = os.getloadavg()
    print(
        f"load at the end {load[0]:.2f}; median finished/s: "
        f"wakes {statistics.median(r['finished_per_s'] for r in rows if r['side'] == 'wakes'):,.0f}, "
        f"tasks-db {statistics.median(r['finished_per_s'] for r in rows if r['side'] == 'tasks-db'):,.0f}"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "enqueue":
        print(json.dumps(enqueue(int(sys.argv[2]))))
    else:
        main()
