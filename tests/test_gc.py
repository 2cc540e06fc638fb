"""``gc``: delete only terminal wakes older than the cutoff, with their attempt history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import django_wakes
from django_wakes.exceptions import InvalidDuration
from django_wakes.models import State, Wake, WakeAttempt
from django_wakes.testing import fake_clock

from .factories import WakeAttemptFactory, WakeFactory

pytestmark = pytest.mark.django_db

TICK = timedelta(microseconds=1)


def aged(clock, age, **fields):
    """A wake last updated ``age`` ago."""
    at = clock.now() - age
    return WakeFactory(created_at=at, updated_at=at, **fields)


def test_gc_deletes_only_old_terminal_rows_and_their_attempts(clock):
    old = timedelta(days=31)
    doomed = [
        aged(clock, old, state=state, due_at=None)
        for state in (State.FIRED, State.EXPIRED, State.CANCELLED, State.DEAD)
    ]
    for wake in doomed:
        WakeAttemptFactory(wake=wake)
        WakeAttemptFactory(wake=wake, number=2)
    old_pending = aged(clock, old, state=State.PENDING)
    old_firing = aged(clock, old, state=State.FIRING, lease_until=clock.now() - old, claim_token="t" * 32)
    recent_fired = aged(clock, timedelta(days=29), state=State.FIRED)
    keep_attempt = WakeAttemptFactory(wake=recent_fired)
    pending_attempt = WakeAttemptFactory(wake=old_pending)

    assert django_wakes.gc(older_than="30d") == 4

    remaining = set(Wake.objects.values_list("pk", flat=True))
    assert remaining == {old_pending.pk, old_firing.pk, recent_fired.pk}
    assert not WakeAttempt.objects.filter(wake_id__in=[w.pk for w in doomed]).exists()
    assert set(WakeAttempt.objects.values_list("pk", flat=True)) == {keep_attempt.pk, pending_attempt.pk}


def test_gc_cutoff_is_exclusive(clock):
    at_cutoff = aged(clock, timedelta(days=30), state=State.FIRED)
    just_past = aged(clock, timedelta(days=30) + TICK, state=State.FIRED)
    assert django_wakes.gc(older_than="30d") == 1
    assert list(Wake.objects.values_list("pk", flat=True)) == [at_cutoff.pk]
    assert not Wake.objects.filter(pk=just_past.pk).exists()


def test_gc_works_in_batches(clock):
    for _ in range(7):
        WakeAttemptFactory(wake=aged(clock, timedelta(days=2), state=State.DEAD))
    assert django_wakes.gc(older_than="1d", batch=3) == 7
    assert Wake.objects.count() == 0
    assert WakeAttempt.objects.count() == 0


def test_gc_with_nothing_to_do(clock):
    aged(clock, timedelta(days=400), state=State.PENDING)
    assert django_wakes.gc() == 0
    assert Wake.objects.count() == 1


def test_gc_of_wakes_settled_through_the_engine(clock, sinks):
    sinks("test.gc")
    fired = django_wakes.schedule(workspace_id="ws", kind="test.gc", delay="0s")
    cancelled = django_wakes.schedule(workspace_id="ws", kind="test.gc", delay="1h")
    live = django_wakes.schedule(workspace_id="ws", kind="test.gc", delay="90d")
    django_wakes.run_due()
    django_wakes.cancel(cancelled.pk)
    assert WakeAttempt.objects.filter(wake_id=fired.pk).count() == 1
    assert django_wakes.gc(older_than="1d") == 0  # too recent
    clock.advance("1d")
    clock.advance(TICK)
    assert django_wakes.gc(older_than="1d") == 2
    assert list(Wake.objects.values_list("pk", flat=True)) == [live.pk]
    assert WakeAttempt.objects.count() == 0


def test_gc_forgets_idempotency_keys_of_deleted_wakes(clock, sinks):
    sinks("test.gc")
    first = django_wakes.schedule(workspace_id="ws", kind="test.gc", delay="0s", idempotency_key="once")
    django_wakes.run_due()
    assert django_wakes.schedule(workspace_id="ws", kind="test.gc", delay="0s", idempotency_key="once").pk == first.pk
    clock.advance("31d")
    assert django_wakes.gc(older_than="30d") == 1
    again = django_wakes.schedule(workspace_id="ws", kind="test.gc", delay="0s", idempotency_key="once")
    assert again.pk != first.pk


def test_gc_rejects_a_bad_duration(clock):
    aged(clock, timedelta(days=400), state=State.FIRED)
    with pytest.raises(InvalidDuration):
        django_wakes.gc(older_than="a while")
    assert Wake.objects.count() == 1


@pytest.mark.django_db
def test_gc_forgets_webhook_delivery_ids_older_than_30_days():
    """Not sooner: senders retry a delivery whose 200 was lost for days (Stripe: 3); GitHub's id is its only guard."""
    from django_wakes.models import WebhookDelivery

    with fake_clock(datetime(2030, 1, 1, tzinfo=UTC)) as clock:
        WebhookDelivery.objects.create(source="ci", delivery_id="old", received_at=clock.now())
        clock.advance("3d")
        django_wakes.gc()
        assert WebhookDelivery.objects.count() == 1  # a Stripe retry on day three is still a duplicate
        clock.advance("27d")
        clock.advance("1s")
        WebhookDelivery.objects.create(source="ci", delivery_id="new", received_at=clock.now())
        django_wakes.gc()
    assert list(WebhookDelivery.objects.values_list("delivery_id", flat=True)) == ["new"]
