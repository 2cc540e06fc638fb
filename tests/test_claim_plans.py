"""The claim path's indexes and PostgreSQL's one-statement claim.

* The claim's queries read the partial indexes over live rows, even when the table's statistics say
  nothing is pending (a table of terminal rows analysed between two bursts).
* On PostgreSQL a claim pass is one ``UPDATE … RETURNING`` over ``SELECT … FOR UPDATE SKIP LOCKED``
  candidates; it keeps the two-step claim's guarantees: a row another transaction holds is skipped,
  fencing tokens grow, a lane is single-file (a conflict falls back to the two-step claim), lapsed
  leases are taken over first, and wakes whose result is decided in Python (expiry, catch-up) are
  still claimed in the same pass.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

import django_wakes
from django_wakes import engine
from django_wakes.engine import claim as claim_module
from django_wakes.models import Fence, State, Wake

KIND = "test.plans"
WS = "ws-plans"

pytestmark = pytest.mark.django_db

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL: planner statistics and the one-statement claim"
)
PARTIAL = {
    "wake_pending_due_idx",
    "wake_pending_order_idx",
    "wake_pending_lane_idx",
    "wake_firing_lease_idx",
    "wake_terminal_updated_idx",
}


def _index_names() -> set[str]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Wake._meta.db_table)
    return {name for name, c in constraints.items() if c["index"]}


def test_the_claim_path_indexes_are_partial_over_live_rows_where_the_database_has_them():
    names = _index_names()
    if connection.vendor == "mysql":  # no partial indexes: Django creates them without their condition
        my = {"wake_my_claim_due_idx", "wake_my_claim_order_idx", "wake_my_lane_head_idx", "wake_my_lease_idx"}
        assert names >= PARTIAL | my  # and 0017/0018 add state-leading ones
    else:
        assert names >= PARTIAL
        assert not {"wake_claim_due_idx", "wake_lane_head_idx", "wake_lease_idx", "wake_gc_idx"} & names


@postgres_only
def test_with_statistics_saying_nothing_is_pending_the_claim_reads_only_live_row_indexes(clock, sinks):
    """Statistics taken while every row was terminal: the plan still walks the pending rows' indexes."""
    sinks(KIND)
    now = clock.now()
    history = [
        Wake(
            workspace_id=WS,
            trigger_type="at",
            kind=KIND,
            serial_key=f"lane-{i % 20}",
            state=State.FIRED,
            fire_at=now - timedelta(days=1),
            created_at=now - timedelta(days=1),
            updated_at=now - timedelta(days=1),
        )
        for i in range(3000)
    ]
    Wake.objects.bulk_create(history, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_wakes_wake")  # the statistics: all terminal
    for i in range(40):
        django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key=f"lane-{i % 20}", delay="0s")
    candidates = Wake.objects.claimable(now, [KIND]).values_list("id", flat=True)[:100]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # an index must be chosen: which one?
        sql, params = candidates.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    used = {name for name in _index_names() if f" {name} " in f"{plan} "}
    others = {name for name in used if not name.startswith("django_wakes_wake_lane_lock")}  # lane_free's probe
    live = {"wake_pending_due_idx", "wake_pending_order_idx", "wake_pending_lane_idx", "wake_firing_lease_idx"}
    assert others & {"wake_pending_due_idx", "wake_pending_order_idx"} and others <= live, plan


@postgres_only
def test_one_statement_claims_plain_wakes_with_their_lease_token_lane_and_result(clock, sinks):
    sinks(KIND)
    lone = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", intent={"n": 1})
    laned = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="L")
    behind = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1s", serial_key="L")
    clock.advance("2s")
    claims = engine.claim_batch(runner_id="A")
    assert [c.wake.pk for c in claims] == [lone.pk, laned.pk]  # one per lane, earliest first
    for c in claims:
        row = Wake.objects.get(pk=c.wake.pk)
        assert row.state == State.FIRING and row.claim_token == c.token and row.claimed_by == "A"
        assert row.result == {"trigger": "at"} == c.result
        assert row.attempts == 1 == c.wake.attempts
        assert c.wake.intent == row.intent and c.wake.fence == row.fence > 0
        assert row.lease_until == c.wake.lease_until > clock.now()
    assert Wake.objects.get(pk=laned.pk).lane_lock == "L"
    assert Wake.objects.get(pk=behind.pk).state == State.PENDING


@postgres_only
def test_fencing_tokens_grow_across_one_statement_and_two_step_claims(clock, sinks, monkeypatch):
    sinks(KIND)
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="F")
    second = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="F")
    [a] = engine.claim_batch(runner_id="A")
    engine.fire(a)
    monkeypatch.setattr(claim_module, "ONE_STATEMENT_VENDORS", frozenset())
    [b] = engine.claim_batch(runner_id="B")  # two-step: a Fence row
    engine.fire(b)
    monkeypatch.undo()
    third = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="F")
    [c] = engine.claim_batch(runner_id="C")
    assert [a.wake.pk, b.wake.pk, c.wake.pk] == [first.pk, second.pk, third.pk]
    assert a.wake.fence < b.wake.fence < c.wake.fence
    assert b.wake.fence == Fence.objects.order_by("-pk").first().pk


@postgres_only
def test_a_lane_conflict_falls_back_to_the_two_step_claim_which_skips_the_busy_lane(clock, sinks, monkeypatch):
    """The unique lane_lock is the last guard: with the lane pre-filter gone, the statement meets it."""
    sinks(KIND)
    held = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="busy")
    [holder] = engine.claim_batch(runner_id="A")
    assert holder.wake.pk == held.pk
    waiting = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key="busy")
    free = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    from django_wakes.querysets import WakeQuerySet

    monkeypatch.setattr(WakeQuerySet, "lane_free", lambda self: self)  # as if read before A committed
    monkeypatch.setattr(claim_module, "_statements", {})
    claims = engine.claim_batch(runner_id="B")
    assert [c.wake.pk for c in claims] == [free.pk]
    assert Wake.objects.get(pk=waiting.pk).state == State.PENDING
    assert Wake.objects.get(pk=held.pk).claimed_by == "A"


@postgres_only
def test_a_lapsed_lease_makes_the_pass_take_it_over_first(clock, sinks):
    sinks(KIND)
    crashed = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    [lost] = engine.claim_batch(runner_id="dead")
    clock.advance("6m")  # past the default lease
    due = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    claims = engine.claim_batch(runner_id="B", limit=1)
    assert [(c.wake.pk, c.takeover) for c in claims] == [(crashed.pk, True)]
    assert claims[0].token != lost.token
    [next_one] = engine.claim_batch(runner_id="B")
    assert next_one.wake.pk == due.pk and not next_one.takeover


@postgres_only
def test_wakes_whose_result_is_decided_in_python_are_claimed_in_the_same_pass(clock, sinks):
    sinks(KIND)
    expired = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="never", expires_in="1s")
    plain = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1s")
    chain = django_wakes.schedule(workspace_id=WS, kind=KIND, every="1s", catch_up="latest")
    clock.advance("5s")
    claims = {c.wake.pk: c for c in engine.claim_batch(runner_id="A")}
    assert set(claims) == {expired.pk, plain.pk, chain.pk}
    assert claims[expired.pk].expired and claims[expired.pk].result["expired"] is True
    assert claims[plain.pk].result == {"trigger": "at"} and not claims[plain.pk].expired
    assert claims[chain.pk].result.get("missed", 0) >= 1  # the catch-up plan, decided in Python
    assert all(Wake.objects.get(pk=pk).state == State.FIRING for pk in claims)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_row_another_transaction_holds_is_skipped_and_the_claim_commits_on_its_own(clock, sinks):
    sinks(KIND)
    locked = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(Wake.objects.select_for_update().filter(pk=locked.pk))
                holding.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        claims = engine.claim_batch(runner_id="A")
    finally:
        release.set()
        thread.join(10)
    assert [c.wake.pk for c in claims] == [other.pk]
    assert not connection.in_atomic_block
    seen = {}

    def look() -> None:  # another connection sees the claim: it committed without a transaction around it
        try:
            seen["state"] = Wake.objects.get(pk=other.pk).state
        finally:
            connections.close_all()

    looker = threading.Thread(target=look)
    looker.start()
    looker.join(10)
    assert seen == {"state": State.FIRING}
    [later] = engine.claim_batch(runner_id="A")
    assert later.wake.pk == locked.pk
