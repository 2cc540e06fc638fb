"""``schedule_many``: many ``schedule()`` calls in one transaction, with the same validation and idempotency."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import InvalidDuration, InvalidWake, SessionStopped, UnknownKind, WakeError
from django_wakes.models import State, Wake

pytestmark = pytest.mark.django_db

KIND = "test.many"
WS = "ws-many"


def test_it_creates_every_item_in_order_with_what_schedule_would_write(clock, sinks):
    calls = sinks(KIND)
    now = clock.now()
    wakes = django_wakes.schedule_many(
        [
            {"delay": "0s", "intent": {"n": 1}},
            {"at": now + timedelta(minutes=5), "serial_key": "L", "priority": 3},
            {"every": "1h", "queue_name": "q"},
            {"delay": "10s", "expires_in": "5s"},
        ],
        workspace_id=WS,
        kind=KIND,
    )
    assert [w.pk for w in wakes] == sorted(w.pk for w in wakes) and all(w.pk for w in wakes)
    rows = {w.pk: w for w in Wake.objects.filter(pk__in=[w.pk for w in wakes])}
    one, laned, chain, expiring = (rows[w.pk] for w in wakes)
    single = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", intent={"n": 1})
    for field in ("state", "trigger_type", "fire_at", "due_at", "max_attempts", "depth", "queue_name", "priority"):
        assert getattr(one, field) == getattr(single, field), field
    assert one.intent == {"n": 1} and one.state == State.PENDING
    assert laned.serial_key == "L" and laned.priority == 3 and laned.due_at == now + timedelta(minutes=5)
    assert chain.every == timedelta(hours=1) and chain.chain_id and chain.queue_name == "q"
    assert expiring.expires_at == now + timedelta(seconds=5) == expiring.due_at
    assert django_wakes.run_due().fired == 2  # the due one and the single schedule()
    assert sorted(calls.ids) == sorted([one.pk, single.pk])


def test_a_bad_item_raises_naming_it_and_nothing_is_written(clock, sinks):
    sinks(KIND)
    good = {"delay": "1s"}
    cases = [
        ({"delay": "soon"}, InvalidDuration),
        ({"delay": "1s", "at": clock.now()}, InvalidWake),
        ({"delay": "1s", "kind": "no.such.kind"}, UnknownKind),
        ({"delay": "1s", "surprise": 1}, InvalidWake),
        ({"delay": "1s", "intent": {"x": object()}}, WakeError),
        ("not a mapping", InvalidWake),
    ]
    for bad, error in cases:
        with pytest.raises(error, match="item 2"):
            django_wakes.schedule_many([good, good, bad, good], workspace_id=WS, kind=KIND)
    assert not Wake.objects.filter(workspace_id=WS).exists()


def test_idempotency_keys_return_the_existing_wake_or_an_earlier_items(clock, sinks):
    sinks(KIND)
    before = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1s", idempotency_key="k1")
    wakes = django_wakes.schedule_many(
        [
            {"delay": "2s", "idempotency_key": "k1"},  # exists already
            {"delay": "3s", "idempotency_key": "k2"},
            {"delay": "4s", "idempotency_key": "k2"},  # same as the previous item
            {"delay": "5s", "idempotency_key": "k1", "workspace_id": "elsewhere"},  # keys are per workspace
        ],
        workspace_id=WS,
        kind=KIND,
    )
    assert wakes[0].pk == before.pk and wakes[0].fire_at == before.fire_at
    assert wakes[1].pk == wakes[2].pk != before.pk
    assert wakes[3].pk not in (before.pk, wakes[1].pk) and wakes[3].workspace_id == "elsewhere"
    assert Wake.objects.count() == 3
    again = django_wakes.schedule_many([{"delay": "9s", "idempotency_key": "k2"}], workspace_id=WS, kind=KIND)
    assert [w.pk for w in again] == [wakes[1].pk]


def test_coalescing_items_keep_one_pending_wake_per_lane(clock, sinks):
    sinks(KIND)
    wakes = django_wakes.schedule_many(
        [{"delay": "1s", "serial_key": "C", "coalesce": True}, {"delay": "2s", "serial_key": "C", "coalesce": True}],
        workspace_id=WS,
        kind=KIND,
    )
    assert wakes[0].pk == wakes[1].pk
    assert Wake.objects.filter(serial_key="C", state=State.PENDING).count() == 1


def test_a_stopped_session_refuses_the_whole_call(clock, sinks):
    sinks(KIND)
    django_wakes.stop_session("s-stopped", reason="test", workspace_id=WS)
    with pytest.raises(SessionStopped):
        django_wakes.schedule_many(
            [{"delay": "1s"}, {"delay": "1s", "session_id": "s-stopped"}], workspace_id=WS, kind=KIND
        )
    assert not Wake.objects.filter(workspace_id=WS).exists()


def test_an_empty_call_creates_nothing():
    assert django_wakes.schedule_many([], workspace_id=WS) == []


def test_wakes_created_while_a_sink_runs_are_one_deeper(clock, sinks):
    made = []
    sinks(
        KIND,
        then=lambda wake, result: made.extend(
            django_wakes.schedule_many([{"delay": "1h"}] * 2, workspace_id=WS, kind="test.child")
        ),
    )
    sinks("test.child")
    parent = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert [Wake.objects.get(pk=w.pk).depth for w in made] == [parent.depth + 1] * 2


def test_the_created_wakes_fire_like_scheduled_ones(clock, sinks):
    calls = sinks(KIND)
    wakes = django_wakes.schedule_many(
        [{"delay": "0s", "serial_key": "lane"} for _ in range(3)], workspace_id=WS, kind=KIND
    )
    for _ in range(3):
        claims = engine.claim_batch(runner_id="A")
        assert len(claims) == 1  # a lane fires one at a time, earliest first
        engine.fire(claims[0])
    assert calls.ids == [w.pk for w in wakes]


def test_many_plain_wakes_go_out_in_a_few_statements_and_come_back_as_stored(sinks):
    """3,000 plain wakes: a COPY on PostgreSQL (one statement to draw the ids), 1,000-row INSERTs elsewhere.

    ``bulk_create`` wrote 500 rows per statement (6 here); what comes back must be what was stored,
    each wake with its own intent object.
    """
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor == "sqlite":
        pytest.skip("SQLite caps the parameters of one statement: its batches stay small")
    sinks(KIND)
    items = [{"delay": f"{60 + n % 7}s", "intent": {"n": n}} for n in range(3000)]
    with CaptureQueriesContext(connection) as queries:
        wakes = django_wakes.schedule_many(items, workspace_id=WS, kind=KIND, serial_key=None)
    writes = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"] or "nextval" in q["sql"]]
    assert len(writes) <= 3, [sql[:80] for sql in writes]
    assert len({w.pk for w in wakes}) == 3000
    rows = {w.pk: w for w in Wake.objects.filter(workspace_id=WS)}
    for wake in wakes[:5] + wakes[-5:]:
        stored = rows[wake.pk]
        for field in Wake._meta.concrete_fields:
            assert getattr(wake, field.attname) == getattr(stored, field.attname), field.name
    wakes[0].intent["n"] = -1
    assert wakes[1].intent == {"n": 1}
    assert not wakes[0]._state.adding and wakes[0]._state.db == "default"


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_creator_of_the_same_key_wins_and_schedule_many_returns_its_wake(sinks):
    """On PostgreSQL the plain rows go out by COPY on psycopg's own cursor: its unique violation must be
    Django's IntegrityError, so the pass is retried and reads the winner (it was a raw psycopg error)."""
    import threading
    import time

    from django.db import connection, transaction

    sinks(KIND)
    inserted = threading.Event()
    other: list[int] = []

    def concurrent_creator() -> None:
        try:
            with transaction.atomic():
                other.append(django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1h", idempotency_key="k").pk)
                inserted.set()
                time.sleep(1.5)  # commits while schedule_many waits on the unique index
        finally:
            connection.close()

    thread = threading.Thread(target=concurrent_creator)
    thread.start()
    assert inserted.wait(10)
    try:
        got = django_wakes.schedule_many([{"delay": "1h", "idempotency_key": "k"}], workspace_id=WS, kind=KIND)
    finally:
        thread.join()
    assert [wake.pk for wake in got] == other
    assert Wake.objects.filter(idempotency_key="k").count() == 1
