"""The console reading off a real streaming replica: ``python -m tests.ha_console`` (``tests/test_ha.py``).

Run with ``DATABASE_URL`` on the Patroni cluster's primary (multi-host) and ``WAKES_READ_DATABASE_URL``
on its standby, so ``WAKES["READ_DATABASE"] = "replica"``. It drives the admin with Django's test client
and records, per page, which alias the wake queries went to and what the page said about the replica's
lag; then it pauses replay on the standby (``pg_wal_replay_pause()``), creates a wake on the primary and
shows that the list (the replica) does not have it while an action posted from the list (the primary)
finds and cancels it. Prints one JSON document; the test judges it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

WS = "ws-ha-console"


def _wake_queries(captured: Any) -> int:
    return sum(1 for query in captured.captured_queries if "django_wakes_wake" in query["sql"])


def main() -> dict[str, Any]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from django_wakes import schedule
    from django_wakes.models import Wake

    setup_test_environment()  # the test client's response.content needs no more; ALLOWED_HOSTS gets testserver
    user, _ = get_user_model().objects.get_or_create(username="ha-console", defaults={"is_staff": True})
    user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    first = [schedule(workspace_id=WS, kind="probe.ha", delay="1h").pk for _ in range(3)]
    replica = Wake.objects.using("replica")
    deadline = time.monotonic() + 60
    while replica.filter(pk__in=first).count() < len(first):
        if time.monotonic() > deadline:
            raise SystemExit("the standby never showed the wakes created on the primary")
        time.sleep(0.05)
    pages: dict[str, Any] = {}
    for name, url in (
        ("list", "/admin/django_wakes/wake/"),
        ("dashboard", "/admin/django_wakes/wake/dashboard/"),
        ("metrics", "/wakes/metrics/"),
    ):
        with (
            CaptureQueriesContext(connections["default"]) as on_primary,
            CaptureQueriesContext(connections["replica"]) as on_replica,
        ):
            response = client.get(url)
        text = response.content.decode()
        pages[name] = {
            "status": response.status_code,
            "wake_queries_primary": _wake_queries(on_primary),
            "wake_queries_replica": _wake_queries(on_replica),
            "says": [line.strip() for line in text.splitlines() if "replica:" in line or "read_database_lag" in line],
        }

    # The standby stops replaying: what the primary commits now, the replica does not show.
    with connections["replica"].cursor() as cursor:
        cursor.execute("SELECT pg_wal_replay_pause()")
        deadline = time.monotonic() + 30
        while True:
            cursor.execute("SELECT pg_get_wal_replay_pause_state()")
            if cursor.fetchone()[0] == "paused":
                break
            if time.monotonic() > deadline:
                raise SystemExit("replay on the standby did not pause")
            time.sleep(0.05)
    try:
        late = schedule(workspace_id=WS, kind="probe.ha", delay="1h").pk
        time.sleep(1.5)  # the replica falls measurably behind
        listed = client.get("/admin/django_wakes/wake/?q=" + str(late)).content.decode()
        lag_line = [line.strip() for line in listed.splitlines() if "replica:" in line]
        with CaptureQueriesContext(connections["replica"]) as on_replica:
            posted = client.post(
                "/admin/django_wakes/wake/",
                {"action": "cancel_pending", "_selected_action": [str(late)], "index": "0"},
            )
        late_state = Wake.objects.get(pk=late).state
        on_replica_during_action = _wake_queries(on_replica)
    finally:
        with connections["replica"].cursor() as cursor:
            cursor.execute("SELECT pg_wal_replay_resume()")
    return {
        "pages": pages,
        "paused": {
            "late_wake": late,
            "listed_while_paused": f'href="/admin/django_wakes/wake/{late}/change/' in listed,
            "lag_line": lag_line,
            "action_status": posted.status_code,
            "late_state_on_primary": late_state,
            "wake_queries_on_replica_during_action": on_replica_during_action,
        },
    }


if __name__ == "__main__":
    result = main()
    print(json.dumps(result), flush=True)
    sys.exit(0)
