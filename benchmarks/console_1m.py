"""Time the operator console's pages over a million settled wakes on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wakes_console_bench .venv/bin/python benchmarks/console_1m.py

Seeds (once; ``--reseed`` to start again) ``--rows`` fired wakes with one attempt each (20 kinds, 500
workspaces, a lane on every tenth), then the live rows an operator looks for: 2,000 pending wakes
(a tenth overdue, a tenth of a kind no live runner fires), 2,000 queued behind one busy lane, 20
firing wakes held by two live runners (five of them hung: claimed 75 s ago under a 15 s lease), a
paused lane; then ``VACUUM ANALYZE``. Rows go in through ``INSERT ... SELECT generate_series``.

It then GETs each page through the admin (Django's test client, a superuser: routing, permission,
every query, the template) ``--repeat`` times and prints the median and the slowest render, and how
many queries one render ran.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from benchmarks.seeding import insert_select  # noqa: E402
from django_wakes.models import PausedLane, Runner, Wake, WakeAttempt  # noqa: E402


def seed(rows: int) -> None:
    """Insert the settled history and the live rows described in the module docstring."""
    now = timezone.now()
    history = now - timedelta(days=30)
    insert_select(
        Wake,
        rows,
        {
            "workspace_id": "'ws-' || (g %% 500)",
            "trigger_type": "'at'",
            "kind": "'kind.' || (g %% 20)",
            "serial_key": "CASE WHEN g %% 10 = 0 THEN 'acct/' || (g %% 5000) END",
            "state": "'fired'",
            "fire_at": "%s + g * interval '2 seconds'",
            "attempts": "1",
            "claimed_by": "'old-runner'",
            "created_at": "%s + g * interval '2 seconds'",
            "updated_at": "%s + g * interval '2 seconds'",
            "claimed_at": "%s + g * interval '2 seconds'",
            "settled_at": "%s + g * interval '2 seconds'",
        },
        [history] * 5,
    )
    attempts = WakeAttempt._meta.db_table
    table = Wake._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {attempts} (wake_id, number, runner_id, fence, started_at, finished_at, outcome, error,"
            f" error_type) SELECT id, 1, 'old-runner', 0, claimed_at, claimed_at + interval '120 milliseconds',"
            f" 'fired', '', '' FROM {table} WHERE state = 'fired'"
        )
    insert_select(
        Wake,
        2000,
        {
            "workspace_id": "'ws-' || (g %% 50)",
            "session_id": "'sess-' || g",
            "trigger_type": "'at'",
            "kind": "CASE WHEN g %% 10 = 0 THEN 'kind.stranded' ELSE 'kind.' || (g %% 20) END",
            "state": "'pending'",
            "fire_at": "%s + (g - 200) * interval '1 minute'",
            "due_at": "%s + (g - 200) * interval '1 minute'",
            "created_at": "%s",
            "updated_at": "%s",
        },
        [now] * 4,
    )
    insert_select(
        Wake,
        2000,
        {
            "workspace_id": "'ws-1'",
            "trigger_type": "'at'",
            "kind": "'kind.1'",
            "serial_key": "'acct/busy'",
            "state": "'pending'",
            "fire_at": "%s - g * interval '1 second'",
            "due_at": "%s - g * interval '1 second'",
            "created_at": "%s",
            "updated_at": "%s",
        },
        [now] * 4,
    )
    insert_select(
        Wake,
        20,
        {
            "workspace_id": "'ws-1'",
            "trigger_type": "'at'",
            "kind": "'kind.' || g",
            "serial_key": "CASE WHEN g = 1 THEN 'acct/busy' ELSE 'acct/live-' || g END",
            "lane_lock": "CASE WHEN g = 1 THEN 'acct/busy' ELSE 'acct/live-' || g END",
            "state": "'firing'",
            "claim_token": "md5(g::text)",
            "claimed_by": "CASE WHEN g %% 2 = 0 THEN 'runner-a' ELSE 'runner-b' END",
            "claimed_at": "CASE WHEN g <= 5 THEN %s - interval '75 seconds' ELSE %s - interval '1 second' END",
            "lease_until": "%s",
            "fire_at": "%s",
            "attempts": "1",
            "created_at": "%s",
            "updated_at": "%s",
        },
        [now, now, now + timedelta(seconds=10), now, now, now],
    )
    kinds = [f"kind.{i}" for i in range(20)]
    for name in ("runner-a", "runner-b"):
        Runner.objects.create(id=name, host="bench", pid=1, started_at=now, heartbeat_at=now, kinds=kinds)
    PausedLane.objects.create(serial_key="acct/77", paused_at=now, paused_by="bench", reason="benchmark")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--reseed", action="store_true")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        raise SystemExit("this benchmark seeds with generate_series: point DATABASE_URL at PostgreSQL")
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["*"]
    call_command("migrate", verbosity=0)
    if args.reseed:
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE django_wakes_wakeattempt, django_wakes_wake, django_wakes_runner,"
                " django_wakes_pausedlane CASCADE"
            )
    if not Wake.objects.exists():
        started = time.perf_counter()
        seed(args.rows)
        print(f"seeded {Wake.objects.count():,} wakes in {time.perf_counter() - started:.0f}s")
    else:  # a reused seed: the runners are live again and the firing wakes as fresh (or as hung) as when seeded
        now = timezone.now()
        Runner.objects.update(heartbeat_at=now)
        firing = Wake.objects.filter(state="firing")
        firing.filter(pk__in=list(firing.order_by("id").values_list("pk", flat=True)[:5])).update(
            claimed_at=now - timedelta(seconds=75)
        )
        firing.exclude(claimed_at=now - timedelta(seconds=75)).update(claimed_at=now - timedelta(seconds=1))
        firing.update(lease_until=now + timedelta(seconds=10))
    user = get_user_model().objects.filter(username="bench").first() or get_user_model().objects.create_superuser(
        "bench", password="bench"
    )
    client = Client()
    client.force_login(user)
    some = Wake.objects.filter(state="firing").order_by("id").values_list("pk", flat=True).first()
    changelist = reverse("admin:django_wakes_wake_changelist")
    pages = {
        "wake list": (changelist, {}),
        "list: hung": (changelist, {"attention": "hung"}),
        "list: unwakeable": (changelist, {"attention": "unwakeable"}),
        "list: overdue": (changelist, {"attention": "overdue"}),
        "list: search 'acct/12' (prefix)": (changelist, {"q": "acct/12"}),
        "list: search 'kind.stranded' (prefix)": (changelist, {"q": "kind.stranded"}),
        "list: search a wake id": (changelist, {"q": str(some)}),
        "wake page (firing)": (reverse("admin:django_wakes_wake_change", args=[some]), {}),
        "lanes": (reverse("admin:django_wakes_lanes"), {}),
        "lane 'acct/busy' (2,000 queued)": (reverse("admin:django_wakes_lanes"), {"lane": "acct/busy"}),
    }
    print(
        f"{Wake.objects.count():,} wakes; PostgreSQL {connection.pg_version}; {platform.machine()},"
        f" {os.cpu_count()} cores; median / slowest of {args.repeat} renders"
    )
    for label, (url, params) in pages.items():
        times = []
        for _ in range(args.repeat):
            reset_queries()
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url, params)
                times.append(time.perf_counter() - started)
            assert response.status_code == 200, (label, response.status_code)
        print(
            f"  {label:40} {statistics.median(times) * 1000:7.1f} ms / {max(times) * 1000:7.1f} ms"
            f"  {len(queries)} queries"
        )


if __name__ == "__main__":
    main()
