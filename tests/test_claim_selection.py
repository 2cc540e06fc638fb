"""What a claim picks among due wakes: priority, queues, paused lanes; and what a settle keeps (output, error type)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.exceptions import InvalidWake
from django_wakes.models import PausedLane, State, Wake, WakeAttempt
from django_wakes.sinks import Done, Stop

pytestmark = pytest.mark.django_db

KIND = "test.selection"
WS = "ws-selection"


def test_a_higher_priority_is_claimed_first_among_due_wakes(clock, sinks):
    calls = sinks(KIND)
    now = clock.now()
    old_low = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=5))
    new_high = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now, priority=10)
    mid = django_wakes.schedule(workspace_id=WS, kind=KIND, at=now - timedelta(minutes=1), priority=5)
    django_wakes.schedule(workspace_id=WS, kind=KIND, at=now + timedelta(minutes=1), priority=100)  # not due

    for _ in range(3):
        assert django_wakes.run_due(limit=1).fired == 1
    assert calls.ids == [new_high.pk, mid.pk, old_low.pk]


def test_a_lane_keeps_its_own_order_whatever_the_priority(clock, sinks):
    calls = sinks(KIND)
    now = clock.now()
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", at=now - timedelta(minutes=2))
    urgent = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", at=now, priority=50)
    for _ in range(2):
        django_wakes.run_due()
    assert calls.ids == [first.pk, urgent.pk]


def test_a_runner_serves_only_the_queues_it_is_given(clock, sinks):
    calls = sinks(KIND)
    mail = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", queue_name="mail")
    plain = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert plain.queue_name == "default"

    assert django_wakes.run_due(queues=["mail"]).fired == 1
    assert calls.ids == [mail.pk]
    assert Wake.objects.get(pk=plain.pk).state == State.PENDING
    assert django_wakes.run_due(queues=["default"]).fired == 1
    assert calls.ids == [mail.pk, plain.pk]


def test_a_recurring_chain_keeps_its_priority_and_queue(clock, sinks):
    sinks(KIND)
    first = django_wakes.schedule(workspace_id=WS, kind=KIND, every="1m", priority=3, queue_name="q")
    clock.advance("1m")
    assert django_wakes.run_due(queues=["q"]).fired == 1
    nxt = Wake.objects.get(chain_id=first.chain_id, state=State.PENDING)
    assert (nxt.priority, nxt.queue_name) == (3, "q")


def test_a_paused_lane_is_not_claimed_until_resumed(clock, sinks):
    calls = sinks(KIND)
    held = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="P", delay="0s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="Q", delay="0s")
    PausedLane.objects.create(serial_key="P", paused_at=clock.now())

    assert django_wakes.run_due().fired == 1
    assert calls.ids == [other.pk]
    assert Wake.objects.get(pk=held.pk).state == State.PENDING
    PausedLane.objects.filter(serial_key="P").delete()
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [other.pk, held.pk]


@pytest.mark.parametrize("bad", [1.5, "1", True, 40000, -40000])
def test_a_bad_priority_is_refused_and_nothing_is_written(bad):
    with pytest.raises(InvalidWake, match="priority"):
        django_wakes.schedule(workspace_id=WS, kind="session_turn", session_id="s", delay="1m", priority=bad)
    assert not Wake.objects.exists()


def test_a_bad_queue_name_is_refused(sinks):
    sinks(KIND)
    with pytest.raises(InvalidWake, match="queue_name"):
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", queue_name="")
    with pytest.raises(InvalidWake, match="queue_name"):
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", queue_name="q" * 101)
    assert not Wake.objects.exists()


@pytest.mark.parametrize("marker", [Done, Stop])
def test_done_and_stop_keep_their_output_on_the_wake(clock, sinks, marker):
    sinks(KIND, then=lambda wake, result: marker(output={"answer": 42}))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert Wake.objects.get(pk=wake.pk).output == {"answer": 42}


def test_an_output_that_is_not_json_fails_the_attempt(clock, sinks):
    sinks(KIND, then=lambda wake, result: Done(output={1, 2}))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert django_wakes.run_due().failed == 1
    row = Wake.objects.get(pk=wake.pk)
    assert row.output is None and "invalid Done" in row.last_error


def test_a_failed_attempt_records_the_exception_class(clock, sinks):
    class Boom(RuntimeError):
        pass

    sinks(KIND, then=Boom("nope"))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    (attempt,) = WakeAttempt.objects.filter(wake_id=wake.pk)
    assert attempt.error_type == f"{__name__}.test_a_failed_attempt_records_the_exception_class.<locals>.Boom"
    assert "nope" in attempt.error


def test_claim_batch_takes_over_lapsed_wakes_only_in_its_queues(clock, sinks):
    sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", queue_name="mail")
    assert len(engine.claim_batch(runner_id="dead", lease=timedelta(seconds=5))) == 1
    clock.advance("10s")
    assert engine.claim_batch(runner_id="other", queues=["default"]) == []
    (taken,) = engine.claim_batch(runner_id="mine", queues=["mail"])
    assert taken.wake.pk == wake.pk and taken.takeover


def test_a_chain_that_skips_or_folds_missed_slots_says_so_with_a_signal(
    clock, sinks, django_capture_on_commit_callbacks
):
    from django_wakes.signals import occurrences_missed

    sinks(KIND)
    heard = []

    def listener(sender, wake, missed, policy, **kwargs):
        heard.append((wake.chain_id, missed, policy))

    occurrences_missed.connect(listener)
    try:
        skip = django_wakes.schedule(workspace_id=WS, kind=KIND, every="1m", catch_up="skip")
        latest = django_wakes.schedule(workspace_id=WS, kind=KIND, every="1m", catch_up="latest")
        replay = django_wakes.schedule(workspace_id=WS, kind=KIND, every="1m", catch_up="replay")
        clock.advance("3m30s")
        with django_capture_on_commit_callbacks(execute=True):
            django_wakes.run_due()
    finally:
        occurrences_missed.disconnect(listener)
    assert sorted(heard) == sorted([(skip.chain_id, 3, "skip"), (latest.chain_id, 2, "latest")])
    assert replay.chain_id not in {chain for chain, _, _ in heard}


@pytest.mark.parametrize("change", ["reschedule", "pause_lane"])
def test_what_an_operator_changed_after_the_candidate_read_is_not_locked(clock, sinks, change):
    """The candidates are read without locks: the locked re-read must see a reschedule or a paused lane."""
    from django.db import transaction

    sinks(KIND)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, serial_key="L", delay="0s")
    now = clock.now()
    candidates = list(Wake.objects.claimable(now, [KIND]).values_list("id", flat=True))
    assert candidates == [wake.pk]  # a runner's plain read saw it due ...
    if change == "reschedule":  # ... then an operator moved it a day ahead, or paused its lane
        engine.reschedule(wake.pk, now + timedelta(days=1))
    else:
        engine.pause_lane("L")
    with transaction.atomic():
        assert list(Wake.objects.lock_pending(candidates, now)) == []
    assert django_wakes.run_due().claimed == 0
    assert Wake.objects.get(pk=wake.pk).state == State.PENDING
