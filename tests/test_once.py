"""``once(session_id, key, fn)``: at most once ever, with a committed receipt before ``fn`` runs."""

from __future__ import annotations

import importlib
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction

import django_wakes
from django_wakes.exceptions import InvalidIntent, InvalidWake, OnceInProgress, OnceInterrupted, WakeError
from django_wakes.models import Receipt, ReceiptState
from django_wakes.receipts import once

from .connection_cuts import kill_connection, needs_a_server, through_proxy
from .factories import ReceiptFactory

pytestmark = pytest.mark.django_db(transaction=True)

once_module = importlib.import_module("django_wakes.receipts")


class Effect:
    """A callable that counts its calls and returns a fixed value (or raises)."""

    def __init__(self, value=None, error=None):
        self.calls = 0
        self.value = value
        self.error = error

    def __call__(self):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.value


def test_fn_runs_once_and_replays_return_the_stored_result():
    effect = Effect({"charged": 42, "ids": (1, 2)})
    assert once("sess-1", "charge", effect) == {"charged": 42, "ids": [1, 2]}
    replay = Effect("must not run")
    assert once("sess-1", "charge", replay) == {"charged": 42, "ids": [1, 2]}
    assert once("sess-1", "charge", effect) == {"charged": 42, "ids": [1, 2]}
    assert effect.calls == 1 and replay.calls == 0
    receipt = Receipt.objects.get(session_id="sess-1", key="charge")
    assert receipt.state == ReceiptState.DONE
    assert receipt.result == {"charged": 42, "ids": [1, 2]}
    assert receipt.completed_at is not None


def test_none_result_is_replayed_as_none_without_calling_fn():
    effect = Effect(None)
    assert once("s", "k", effect) is None
    assert once("s", "k", effect) is None
    assert effect.calls == 1


def test_keys_are_scoped_by_session_and_key():
    effect = Effect("ok")
    once("s1", "k", effect)
    once("s2", "k", effect)
    once("s1", "k2", effect)
    once("s1", "k", effect)
    assert effect.calls == 3
    assert Receipt.objects.count() == 3


def test_the_receipt_is_committed_before_fn_runs():
    seen = []

    def fn():
        # read through a different connection (another thread): the receipt must already be visible
        def look():
            try:
                seen.extend(Receipt.objects.filter(session_id="s", key="k").values_list("state", flat=True))
            finally:
                connections.close_all()

        t = threading.Thread(target=look)
        t.start()
        t.join()
        return 1

    once("s", "k", fn)
    assert seen == [ReceiptState.RUNNING]


def test_fn_raising_releases_the_receipt_and_a_later_call_runs_it():
    failing = Effect(error=RuntimeError("card declined"))
    with pytest.raises(RuntimeError, match="card declined"):
        once("s", "charge", failing)
    assert Receipt.objects.filter(session_id="s", key="charge").count() == 0
    ok = Effect("charged")
    assert once("s", "charge", ok) == "charged"
    assert failing.calls == 1 and ok.calls == 1


def test_interrupted_run_raises_unless_retry(clock):
    lapsed = clock.now() - timedelta(seconds=1)
    ReceiptFactory(session_id="s", key="email", state=ReceiptState.RUNNING, lease_until=lapsed)
    effect = Effect("sent")
    with pytest.raises(OnceInterrupted) as info:
        once("s", "email", effect)
    assert isinstance(info.value, WakeError)
    assert effect.calls == 0
    with pytest.raises(OnceInterrupted):  # still interrupted: the caller has to decide
        once("s", "email", effect)
    assert once("s", "email", effect, on_interrupted="retry") == "sent"
    assert effect.calls == 1
    receipt = Receipt.objects.get(session_id="s", key="email")
    assert receipt.state == ReceiptState.DONE and receipt.result == "sent"
    assert once("s", "email", effect) == "sent"
    assert effect.calls == 1


def test_live_receipt_of_another_owner_is_in_progress_then_interrupted_when_its_lease_lapses(clock, settings):
    settings.WAKES = {**settings.WAKES, "ONCE_LEASE": "1m"}
    ReceiptFactory(session_id="s", key="k", state=ReceiptState.RUNNING, lease_until=clock.now() + timedelta(minutes=1))
    effect = Effect("mine")
    started = time.monotonic()
    with pytest.raises(OnceInProgress):
        once("s", "k", effect, wait=0.2)
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 5
    assert effect.calls == 0
    clock.advance(timedelta(minutes=1) - timedelta(microseconds=1))
    with pytest.raises(OnceInProgress):
        once("s", "k", effect, wait=0)
    clock.advance(timedelta(microseconds=1))
    with pytest.raises(OnceInterrupted):
        once("s", "k", effect, wait=0)
    assert effect.calls == 0


def test_a_concurrent_caller_waits_for_the_winner_and_gets_its_result():
    release = threading.Event()
    started = threading.Event()
    results = {}

    def slow():
        started.set()
        assert release.wait(10)
        return {"winner": True}

    def first_caller():
        try:
            results["first"] = once("s", "slow", slow)
        finally:
            connections.close_all()

    t = threading.Thread(target=first_caller)
    t.start()
    try:
        assert started.wait(10)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        loser = Effect("loser ran")
        results["second"] = once("s", "slow", loser, wait=10)
        timer.join()
    finally:
        release.set()
        t.join(10)
    assert results == {"first": {"winner": True}, "second": {"winner": True}}
    assert loser.calls == 0


def test_once_refuses_to_run_inside_a_transaction():
    effect = Effect(1)
    with transaction.atomic(), pytest.raises(InvalidWake, match="transaction"):
        once("s", "k", effect)
    assert effect.calls == 0
    assert Receipt.objects.count() == 0


@pytest.mark.parametrize(("session_id", "key"), [("", "k"), ("s", ""), (None, "k"), ("s", 5), ("s" * 201, "k")])
def test_bad_session_or_key(session_id, key):
    with pytest.raises(InvalidWake):
        once(session_id, key, Effect(1))
    assert Receipt.objects.count() == 0


def test_non_json_result_is_refused_but_the_effect_is_not_run_again():
    effect = Effect({1, 2})
    with pytest.raises(InvalidIntent):
        once("s", "k", effect)
    assert effect.calls == 1
    # fn did run: the receipt is kept as done (without a result), so a later call never repeats it
    again = Effect("again")
    assert once("s", "k", again, wait=0) is None
    assert again.calls == 0
    assert Receipt.objects.get(session_id="s", key="k").state == "done"


def test_heartbeat_extends_the_lease_while_fn_runs(settings):
    settings.WAKES = {**settings.WAKES, "ONCE_LEASE": "300ms"}  # heartbeat every 100ms
    observed = []

    def long_effect():
        first = Receipt.objects.get(session_id="s", key="long").lease_until
        time.sleep(0.6)
        observed.append((first, Receipt.objects.get(session_id="s", key="long").lease_until))
        return "done"

    assert once("s", "long", long_effect) == "done"
    first, later = observed[0]
    assert later > first


def test_public_once_is_the_function_even_after_its_module_is_imported():
    """``django_wakes.once`` is the API function, also after its module has been imported."""
    assert once_module.__name__ == "django_wakes.receipts"
    assert django_wakes.once is once
    from django_wakes import once as public

    assert callable(public) and public is once


# -- a dropped connection: the effect that ran is recorded done once the database is back -----------


def test_the_done_write_rides_through_a_connection_killed_after_fn_returned():
    """The server ends the connection between ``fn()`` returning and the done-write (a failover would)."""
    needs_a_server()

    calls = []

    def fn():
        calls.append(1)
        kill_connection()  # from here on, this thread's connection is dead
        return {"charged": 42}

    assert once("s", "charge", fn) == {"charged": 42}
    receipt = Receipt.objects.get(session_id="s", key="charge")
    assert (receipt.state, receipt.result) == (ReceiptState.DONE, {"charged": 42})
    assert once("s", "charge", fn) == {"charged": 42}  # a replay: fn is not called again
    assert len(calls) == 1


def test_the_done_write_waits_for_a_database_that_is_away_and_records_it_when_it_is_back():
    """Every connection reset and new ones refused for 1.5 s right after ``fn()``: done, not interrupted."""
    needs_a_server()
    calls = []
    with through_proxy() as proxy:

        def fn():
            calls.append(time.monotonic())
            proxy.cut()
            threading.Timer(1.5, proxy.heal).start()
            return "sent"

        assert once("s", "email", fn) == "sent"
        returned = time.monotonic()
        assert proxy.connections >= 2  # it did reconnect through the proxy once healed
    assert returned - calls[0] >= 1.5  # it could only record it once the database was back
    receipt = Receipt.objects.get(session_id="s", key="email")
    assert (receipt.state, receipt.result) == (ReceiptState.DONE, "sent")
    assert once("s", "email", fn, wait=0) == "sent"
    assert len(calls) == 1


def test_a_receipt_is_released_through_a_cut_when_fn_raises():
    needs_a_server()
    with through_proxy() as proxy:

        def fn():
            proxy.cut()
            threading.Timer(1.0, proxy.heal).start()
            raise RuntimeError("card declined")

        with pytest.raises(RuntimeError, match="card declined"):
            once("s", "charge", fn)
    assert not Receipt.objects.filter(session_id="s", key="charge").exists()
    assert once("s", "charge", Effect("charged")) == "charged"  # released: a later call may try again


def test_taking_the_receipt_rides_through_a_database_that_is_away():
    """The database goes away before the receipt is taken: once() waits for it (up to ``wait``)."""
    needs_a_server()
    effect = Effect("done")
    with through_proxy() as proxy:
        proxy.cut()
        threading.Timer(1.0, proxy.heal).start()
        assert once("s", "k", effect, wait=30) == "done"
    assert effect.calls == 1
    assert Receipt.objects.get(session_id="s", key="k").state == ReceiptState.DONE


def test_the_heartbeat_outlives_a_cut_and_renews_the_lease_after_it(settings):
    """A heartbeat that meets a dropped connection keeps beating (no thread dies) and renews once healed."""
    needs_a_server()
    settings.WAKES = {**settings.WAKES, "ONCE_LEASE": "300ms"}  # a beat every 100 ms
    leases = []

    def read_lease():
        return Receipt.objects.get(session_id="s", key="long").lease_until

    with through_proxy() as proxy:

        def long_effect():
            before = read_lease()
            proxy.cut()
            time.sleep(0.6)  # several beats fail meanwhile
            proxy.heal()
            time.sleep(0.6)  # and later ones succeed
            connections["default"].close()  # this thread's own connection was cut too
            leases.append((before, read_lease()))
            return "done"

        assert once("s", "long", long_effect) == "done"
    before, after = leases[0]
    assert after > before + timedelta(milliseconds=600)
