"""The push listener: hints arrive by LISTEN, and a listener whose connection dropped says so when it is back.

Hints sent while the listener was cut off are lost; once it has reconnected it tells its runner to
look at once (a hint with no due time), so a runner waiting out an outage in its backoff starts its
next pass as soon as the database answers again, not up to a backoff later (a failover on Patroni:
``tests/test_ha.py``).
"""

from __future__ import annotations

import threading
from datetime import datetime

import pytest
from django.db import connection

from django_wakes.engine.notify import CHANNEL
from django_wakes.runner.listener import Listener

pytestmark = pytest.mark.django_db(transaction=True)


class Hints:
    def __init__(self) -> None:
        self.got: list[datetime | None] = []
        self.arrived = threading.Event()

    def __call__(self, due_at: datetime | None) -> None:
        self.got.append(due_at)
        self.arrived.set()


@pytest.fixture
def listener():
    if not Listener.supported("default"):
        pytest.skip("LISTEN needs PostgreSQL with psycopg 3")
    hints = Hints()
    running = Listener("default", hints)
    running.start()
    assert running.ready.wait(10), "the listener did not connect"
    yield running, hints
    running.stop()
    running.join(10)


def listener_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND query LIKE 'LISTEN %%'"
        )
        return [pid for (pid,) in cursor.fetchall()]


def test_a_notify_reaches_the_listener(listener):
    _, hints = listener
    with connection.cursor() as cursor:
        cursor.execute(f"NOTIFY {CHANNEL}, '1700000000000'")
    assert hints.arrived.wait(10)
    (due,) = hints.got
    assert due is not None and due.timestamp() == 1_700_000_000


def test_a_listener_whose_connection_was_cut_asks_for_a_pass_once_it_is_back(listener):
    running, hints = listener
    (backend,) = listener_backends()
    running.ready.clear()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    assert hints.arrived.wait(20), "the listener reconnected without asking its runner to look"
    assert hints.got == [None]  # no due time: "look now", hints may have been lost meanwhile
    assert running.ready.is_set()
    assert listener_backends() != [backend]
