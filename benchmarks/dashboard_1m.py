"""Time the operator dashboard and the metrics scrape over a million settled wakes on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wakes_dash_bench .venv/bin/python benchmarks/dashboard_1m.py

Seeds (once; ``--reseed`` to start again) ``--rows`` terminal wakes spread evenly over ``--days`` days
(the default 1,000,000 over 30 days: the history ``GC_AFTER`` keeps), each fired one with its attempt
row, a dead one with its failed attempts; then live rows: ``--pending`` pending wakes (a tenth overdue,
a tenth waiting for an event), 50 firing wakes held by five live runners, two stale runner rows. The
rows are inserted by ``INSERT ... SELECT generate_series`` built from the models' own fields (any field
not set here takes its model default), then ``VACUUM ANALYZE``.

It then renders the dashboard through the admin (a logged-in superuser, Django's test client: URL
routing, permission check, every query, the template and its SVG) ``--repeat`` times, and scrapes the
metrics as many times, and prints the median and the slowest, with each query of one render and its
time. ``--days 1`` puts the whole history in the last day: the dashboard's day window then reads a
million attempts (the worst case its time-windowed scans can meet).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from benchmarks.seeding import insert_select  # noqa: E402
from django_wakes.console import metrics  # noqa: E402
from django_wakes.models import Runner, State, TriggerType, Wake, WakeAttempt  # noqa: E402

KINDS = 20
RUNNERS = 5


def seed(rows: int, days: int, pending: int) -> None:
    now = timezone.now()
    started = time.perf_counter()
    # Terminal history: row g settled at now - g * (days / rows); 94% fired, 2% expired, 3% cancelled, 1% dead.
    # Literal SQL only (no % placeholders: the defaults of the other fields are the parameters).
    moment = f"('{now.isoformat()}'::timestamptz - (g * interval '{days} days' / {rows}))"
    state = (
        "(CASE WHEN mod(g, 100) = 0 THEN 'dead' WHEN mod(g, 100) < 3 THEN 'cancelled' "
        "WHEN mod(g, 100) < 5 THEN 'expired' ELSE 'fired' END)"
    )
    lateness = "(interval '1 millisecond' * floor(power(random(), 4) * 20000))"  # mostly ms, a tail to 20 s
    history = {
        "workspace_id": "'ws-' || mod(g, 1000)",
        "session_id": "'session-' || mod(g, 50000)",
        "trigger_type": f"'{TriggerType.AT}'",
        "kind": f"'kind-' || mod(g, {KINDS})",
        "state": state,
        "fire_at": moment,
        "due_at": moment,
        "created_at": f"{moment} - interval '1 hour'",
        "claimed_at": f"{moment} + {lateness}",
        "settled_at": f"{moment} + interval '3 seconds'",
        "updated_at": f"{moment} + interval '3 seconds'",
        "attempts": "(CASE WHEN mod(g, 100) = 0 THEN 5 WHEN mod(g, 100) < 3 THEN 0 ELSE 1 END)",
        "last_error": "(CASE WHEN mod(g, 100) = 0 THEN 'RuntimeError: the bench sink broke' ELSE '' END)",
        "result": '\'{"trigger": "at"}\'::jsonb',
    }
    insert_select(Wake, rows, history)
    print(f"  {rows:,} terminal wakes inserted in {time.perf_counter() - started:.0f} s", flush=True)

    table = connection.ops.quote_name(Wake._meta.db_table)
    source = (
        f"(SELECT id, state, claimed_at, settled_at, n FROM {table} CROSS JOIN LATERAL "
        "generate_series(1, CASE WHEN state = 'dead' THEN 5 WHEN state = 'cancelled' THEN 0 ELSE 1 END) AS n) AS w"
    )
    outcome = "(CASE WHEN w.state = 'dead' THEN 'failed' WHEN w.state = 'expired' THEN 'expired' ELSE 'fired' END)"
    insert_select(
        WakeAttempt,
        0,
        {
            "wake": "w.id",
            "number": "w.n",
            "runner_id": "'runner-bench-' || mod(w.id, 5)",
            "started_at": "w.claimed_at - (5 - w.n) * interval '1 minute'",
            "finished_at": "w.settled_at - (5 - w.n) * interval '1 minute'",
            "outcome": outcome,
        },
        source=source,
    )
    print(f"  attempts inserted ({time.perf_counter() - started:.0f} s)", flush=True)

    live: list[Wake] = []
    for index in range(pending):
        kind = f"kind-{index % KINDS}"
        common = {"workspace_id": f"ws-{index % 1000}", "kind": kind, "created_at": now, "updated_at": now}
        if index % 10 == 0:  # overdue
            due = now - timedelta(minutes=2 + index % 30)
            live.append(Wake(trigger_type=TriggerType.AT, state=State.PENDING, fire_at=due, due_at=due, **common))
        elif index % 10 == 1:  # waiting for an event
            live.append(Wake(trigger_type=TriggerType.ON_EVENT, state=State.PENDING, event_key=f"e-{index}", **common))
        else:
            due = now + timedelta(seconds=index * 7)
            live.append(Wake(trigger_type=TriggerType.AT, state=State.PENDING, fire_at=due, due_at=due, **common))
    for index in range(50):
        live.append(
            Wake(
                workspace_id="ws-live",
                kind=f"kind-{index % KINDS}",
                trigger_type=TriggerType.AT,
                state=State.FIRING,
                fire_at=now,
                due_at=now,
                claimed_at=now,
                claimed_by=f"runner-live-{index % RUNNERS}",
                claim_token=f"{index:032d}",
                lease_until=now + timedelta(minutes=5),
                attempts=1,
                created_at=now,
                updated_at=now,
            )
        )
    Wake.objects.bulk_create(live, batch_size=2000)
    for index in range(RUNNERS):
        Runner.objects.create(
            id=f"runner-live-{index}", host="bench", pid=1000 + index, started_at=now, heartbeat_at=now
        )
    for index in range(2):
        old = now - timedelta(minutes=10)
        Runner.objects.create(
            id=f"runner-stale-{index}", host="bench", pid=2000 + index, started_at=old, heartbeat_at=old
        )
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(WakeAttempt._meta.db_table)}")
    print(f"  live rows, runners, VACUUM ANALYZE: seeded in {time.perf_counter() - started:.0f} s", flush=True)


@contextmanager
def recording() -> Iterator[list[tuple[float, str]]]:
    """Record every query run inside the block with its time in ms."""
    queries: list[tuple[float, str]] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - started) * 1000, sql))

    with connection.execute_wrapper(wrapper):
        yield queries


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # warm: connection, caches, plans
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="terminal wakes (default %(default)s)")
    parser.add_argument("--days", type=int, default=30, help="days the history spans (default %(default)s)")
    parser.add_argument("--pending", type=int, default=5000, help="live pending wakes (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=20, help="timed renders (default %(default)s)")
    parser.add_argument("--reseed", action="store_true", help="empty the tables and seed again")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        raise SystemExit("this benchmark seeds with PostgreSQL's generate_series: point DATABASE_URL at PostgreSQL")

    call_command("migrate", verbosity=0)
    if args.reseed:
        with connection.cursor() as cursor:
            tables = [WakeAttempt._meta.db_table, Wake._meta.db_table, Runner._meta.db_table]
            cursor.execute("TRUNCATE " + ", ".join(connection.ops.quote_name(t) for t in tables) + " CASCADE")
    if not Wake.objects.exists():
        print(f"seeding {args.rows:,} terminal wakes over {args.days} days, {args.pending:,} pending ...", flush=True)
        seed(args.rows, args.days, args.pending)
    else:
        print("reusing the seeded database (--reseed to start again)")
    Runner.objects.filter(id__startswith="runner-live-").update(heartbeat_at=timezone.now())

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server = cursor.fetchone()[0]
    attempts = WakeAttempt.objects.count()
    terminal = Wake.objects.exclude(state__in=[State.PENDING, State.FIRING]).count()
    live = Wake.objects.filter(state__in=[State.PENDING, State.FIRING]).count()
    print(
        f"PostgreSQL {server}, Python {platform.python_version()}, {os.cpu_count()} CPUs; "
        f"{terminal:,} terminal wakes, {live:,} live, {attempts:,} attempts"
    )

    user = get_user_model().objects.filter(username="bench-admin").first() or get_user_model().objects.create_superuser(
        "bench-admin", "bench@example.invalid", None
    )
    client = Client()
    client.force_login(user)
    url = reverse("admin:django_wakes_dashboard")

    def render() -> None:
        response = client.get(url)
        assert response.status_code == 200, response.status_code

    with recording() as queries:
        render()
    print(f"\none dashboard render: {len(queries)} queries")
    for ms, sql in sorted(queries, reverse=True)[:12]:
        print(f"  {ms:8.1f} ms  {' '.join(sql.split())[:150]}")

    renders = timed(render, args.repeat)
    scrapes = timed(lambda: metrics.exposition(timezone.now()), args.repeat)
    print(
        f"\ndashboard render (admin page, all queries + template), {args.repeat} runs: "
        f"median {statistics.median(renders):.0f} ms, slowest {max(renders):.0f} ms"
    )
    print(
        f"metrics exposition (all queries + text), {args.repeat} runs: "
        f"median {statistics.median(scrapes):.0f} ms, slowest {max(scrapes):.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
