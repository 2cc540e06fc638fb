"""A database outage inside a sink is retried without charging an attempt; a wrong query still is charged.

A failover or a restart cuts a sink's own queries too (a ``once()`` receipt, the host's models). That is
not the sink's failure: the wake goes back to pending soon, its attempt not counted, with an attempt row
``outage`` that keeps the error. The cuts are real: the server ends the sink's connection
(``pg_terminate_backend``, ``KILL CONNECTION``), or the connection is refused.
"""

from __future__ import annotations

import sqlite3

import pytest
from django.db import DatabaseError, connection

import django_wakes
from django_wakes.engine.settle import OUTAGE_RETRY
from django_wakes.engine.shared import is_outage
from django_wakes.models import Outcome, State, Wake, WakeAttempt

from .connection_cuts import kill_connection, needs_a_server
from .fault_servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)

KIND = "test.sink_outages"
WS = "ws-sink-outages"


def attempts_of(wake):
    return list(WakeAttempt.objects.filter(wake_id=wake.pk).order_by("id").values_list("number", "outcome"))


def cut_then_query(wake, result):
    """A sink whose own query meets a connection the server has just ended."""
    kill_connection()
    Wake.objects.count()


def test_a_sink_whose_connection_is_cut_is_retried_soon_and_not_charged(clock, sinks):
    needs_a_server()
    calls = sinks(KIND, then=cut_then_query)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=1)
    report = django_wakes.run_due(runner_id="r1")
    assert (report.failed, report.dead, report.deferred) == (0, 0, 1)
    assert report.outcomes == {wake.pk: Outcome.OUTAGE}
    row = Wake.objects.get(pk=wake.pk)
    assert (row.state, row.attempts) == (State.PENDING, 0)  # max_attempts=1, and still not dead
    assert row.due_at == clock.now() + OUTAGE_RETRY
    (attempt,) = WakeAttempt.objects.filter(wake_id=wake.pk)
    assert attempt.outcome == Outcome.OUTAGE and attempt.error_type == "django.db.utils.OperationalError"
    assert attempt.error  # the traceback is kept for the operator

    sinks(KIND)  # the database is fine now: the same wake fires on its first charged attempt
    clock.advance(OUTAGE_RETRY)
    assert django_wakes.run_due(runner_id="r1").fired == 1
    row = Wake.objects.get(pk=wake.pk)
    assert (row.state, row.attempts) == (State.FIRED, 1)
    assert attempts_of(wake) == [(1, Outcome.OUTAGE), (1, Outcome.FIRED)]
    assert len(calls.ids) == 1


def test_outages_in_a_row_wait_twice_as_long_each_time(clock, sinks):
    needs_a_server()
    sinks(KIND, then=cut_then_query)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    waits = []
    for _ in range(3):
        before = clock.now()
        assert django_wakes.run_due(runner_id="r1").deferred == 1
        waits.append(Wake.objects.get(pk=wake.pk).due_at - before)
        clock.advance(waits[-1])
    assert waits == [OUTAGE_RETRY, 2 * OUTAGE_RETRY, 4 * OUTAGE_RETRY]
    assert Wake.objects.get(pk=wake.pk).attempts == 0


def test_a_wrong_query_in_a_sink_is_still_its_failure(clock, sinks):
    """Only an outage is forgiven: a query the database refuses as wrong is charged as before."""
    needs_a_server()

    def wrong(wake, result):
        with connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM django_wakes_wake")

    sinks(KIND, then=wrong)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=1)
    report = django_wakes.run_due(runner_id="r1")
    assert (report.failed, report.dead, report.deferred) == (1, 1, 0)
    assert Wake.objects.get(pk=wake.pk).state == State.DEAD
    assert attempts_of(wake) == [(1, Outcome.FAILED)]


# -- is_outage, on real driver errors ----------------------------------------------------------------


def _raised(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error is what we test
        return exc
    raise AssertionError("expected an error")


def test_a_refused_connection_is_an_outage_for_each_driver():
    import psycopg

    port = free_port()  # nothing listens there
    assert is_outage(_raised(lambda: psycopg.connect(host="127.0.0.1", port=port, connect_timeout=2)))
    try:
        import MySQLdb
    except ImportError:
        return
    error = _raised(lambda: MySQLdb.connect(host="127.0.0.1", port=port, connect_timeout=2))
    assert error.args[0] == 2002 or error.args[0] == 2003
    assert is_outage(error)


def test_a_killed_connection_is_an_outage_as_django_raises_it():
    needs_a_server()
    kill_connection()
    error = _raised(lambda: Wake.objects.count())
    assert isinstance(error, DatabaseError) and is_outage(error)
    connection.close()


def test_errors_that_are_not_outages():
    needs_a_server()

    def wrong():
        with connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM django_wakes_wake")

    assert not is_outage(_raised(wrong))
    assert not is_outage(ValueError("upstream said 503"))
    locked = sqlite3.OperationalError("database is locked")
    assert not is_outage(locked)
