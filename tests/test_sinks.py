"""The sink registry, and sinks that schedule new wakes (durable retries) inside or outside a transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

import django_wakes
from django_wakes import signals
from django_wakes.exceptions import AlreadyRegistered, NotRegistered, UnknownKind
from django_wakes.models import State, Wake
from django_wakes.sinks import SESSION_TURN, SinkRegistry, registry, sink

KIND = "test.sinks"
WS = "ws-sinks"


def row(wake):
    return Wake.objects.get(pk=wake.pk)


# --------------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------------


def test_decorator_registers_and_returns_the_function():
    @sink("test.sinks.decorated")
    def handler(wake, result):
        return None

    assert registry.get("test.sinks.decorated") is handler
    assert "test.sinks.decorated" in registry.kinds()
    assert django_wakes.sink is sink


def test_registering_another_function_for_a_kind_needs_replace():
    def one(wake, result):
        return None

    def two(wake, result):
        return None

    registry.register("test.sinks.twice", one)
    registry.register("test.sinks.twice", one)  # the same function again is harmless
    with pytest.raises(AlreadyRegistered):
        registry.register("test.sinks.twice", two)
    assert registry.get("test.sinks.twice") is one
    registry.register("test.sinks.twice", two, replace=True)
    assert registry.get("test.sinks.twice") is two


def test_unregister_unknown_kind_raises():
    with pytest.raises(NotRegistered):
        registry.unregister("test.sinks.never")


def test_session_turn_is_built_in_and_follows_spawn_turn(settings):
    with pytest.raises(AlreadyRegistered):
        registry.register(SESSION_TURN, lambda wake, result: None)
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": None}
    assert registry.get(SESSION_TURN) is None
    assert SESSION_TURN not in registry.kinds()
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": "testproject.wakes.spawn_turn"}
    assert registry.get(SESSION_TURN) is not None
    assert SESSION_TURN in registry.kinds()


@pytest.mark.parametrize("bad", ["", None, 3])
def test_kind_must_be_a_non_empty_string(bad):
    with pytest.raises(ValueError):
        registry.register(bad, lambda wake, result: None)


def test_sinks_setting_is_loaded_by_dotted_path(settings):
    fresh = SinkRegistry()
    settings.WAKES = {**settings.WAKES, "SINKS": {"test.sinks.printer": "testproject.wakes.print_intent"}}
    fresh.load_settings()
    from testproject.wakes import print_intent

    assert fresh.get("test.sinks.printer") is print_intent
    assert fresh.kinds() == sorted(["test.sinks.printer", SESSION_TURN])


def test_testproject_sinks_are_autodiscovered():
    from testproject.wakes import print_intent

    assert registry.get("demo.print") is print_intent


@pytest.mark.django_db
def test_kind_registered_after_start_up_can_be_scheduled_and_fired(clock, sinks):
    with pytest.raises(UnknownKind):
        django_wakes.schedule(workspace_id=WS, kind="test.sinks.late", delay="0s")
    calls = sinks("test.sinks.late")
    wake = django_wakes.schedule(workspace_id=WS, kind="test.sinks.late", delay="0s")
    django_wakes.run_due()
    assert calls.ids == [wake.pk]


@pytest.mark.django_db
def test_sink_return_value_other_than_an_outcome_settles_as_fired(clock, sinks):
    sinks(KIND, then=lambda wake, result: {"anything": "goes"})
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert django_wakes.run_due().fired == 1
    assert row(wake).state == State.FIRED


# --------------------------------------------------------------------------------------------------
# Sinks scheduling wakes
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_sink_schedules_a_follow_up_outside_a_transaction(clock, sinks):
    followups = sinks("test.sinks.followup")

    def chain(wake, result):
        django_wakes.schedule(
            workspace_id=wake.workspace_id, kind="test.sinks.followup", delay="1m", intent={"after": wake.pk}
        )

    calls = sinks(KIND, then=chain)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    assert django_wakes.run_due().fired == 1
    followup = Wake.objects.get(kind="test.sinks.followup")
    assert followup.intent == {"after": wake.pk}
    assert followup.fire_at == clock.now() + timedelta(minutes=1)
    clock.advance("1m")
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk] and followups.ids == [followup.pk]


@pytest.mark.django_db
def test_sink_schedules_inside_its_own_atomic_block(clock, sinks):
    sinks("test.sinks.followup")

    def chain(wake, result):
        with transaction.atomic():
            django_wakes.schedule(
                workspace_id=WS, kind="test.sinks.followup", delay="0s", idempotency_key=f"after-{wake.pk}"
            )
            django_wakes.watch(workspace_id=WS, kind="test.sinks.followup", event_key=f"done-{wake.pk}")

    sinks(KIND, then=chain)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert row(wake).state == State.FIRED
    assert Wake.objects.filter(kind="test.sinks.followup").count() == 2
    assert django_wakes.run_due().fired == 1  # the scheduled follow-up fires; the watch waits for its event
    assert django_wakes.deliver_event(workspace_id=WS, event_key=f"done-{wake.pk}") == 1


@pytest.mark.django_db
def test_sink_whose_transaction_rolls_back_leaves_no_follow_up_and_the_retry_schedules_it_once(clock, sinks, settings):
    """A durable retry: the follow-up and the failure are atomic, the idempotency key dedups re-runs."""
    settings.WAKES = {**settings.WAKES, "BACKOFF": {"BASE": "1s", "FACTOR": 1, "MAX": "1s"}}
    followups = sinks("test.sinks.followup")
    attempts = []

    def chain(wake, result):
        attempts.append(wake.attempts)
        with transaction.atomic():
            django_wakes.schedule(
                workspace_id=WS, kind="test.sinks.followup", delay="0s", idempotency_key=f"f-{wake.pk}"
            )
            if len(attempts) == 1:
                raise RuntimeError("crashed after scheduling, before commit")

    sinks(KIND, then=chain)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    report = django_wakes.run_due()
    assert report.failed == 1
    assert Wake.objects.filter(kind="test.sinks.followup").count() == 0
    clock.advance("1s")
    django_wakes.run_due()  # the retry schedules the follow-up; the follow-up itself fires in a later pass
    django_wakes.run_due()
    # a third, duplicated run of the sink would not create a second follow-up
    chain(row(wake), {"trigger": "at"})
    assert Wake.objects.filter(kind="test.sinks.followup").count() == 1
    assert row(wake).state == State.FIRED
    assert len(followups) == 1
    assert attempts == [1, 2, 2]


@pytest.mark.django_db(transaction=True)
def test_sink_scheduling_commits_for_real_and_signals_after_commit(clock, sinks):
    created = []

    def on_created(sender, wake, **kwargs):
        created.append(wake.kind)

    signals.wake_created.connect(on_created)
    try:
        sinks("test.sinks.followup")

        def chain(wake, result):
            with transaction.atomic():
                django_wakes.schedule(workspace_id=WS, kind="test.sinks.followup", delay="0s")
                assert created == ["test.sinks"]  # not yet: the follow-up's signal waits for commit
            django_wakes.schedule(workspace_id=WS, kind="test.sinks.followup", delay="0s")

        sinks(KIND, then=chain)
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
        assert created == [KIND]
        assert django_wakes.run_due().fired == 1
        assert created == [KIND, "test.sinks.followup", "test.sinks.followup"]
        assert django_wakes.run_due().fired == 2
        assert set(Wake.objects.values_list("state", flat=True)) == {State.FIRED}
    finally:
        signals.wake_created.disconnect(on_created)


@pytest.mark.django_db
def test_sink_can_cancel_and_trigger_other_wakes(clock, sinks):
    others = sinks("test.sinks.other")
    victim = django_wakes.schedule(workspace_id=WS, kind="test.sinks.other", delay="1h")
    watcher = django_wakes.watch(workspace_id=WS, kind="test.sinks.other", event_key="poke")

    def act(wake, result):
        assert django_wakes.cancel(victim.pk)
        assert django_wakes.deliver_event(workspace_id=WS, event_key="poke", payload=wake.pk) == 1

    sinks(KIND, then=act)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    django_wakes.run_due()
    assert row(victim).state == State.CANCELLED
    assert others.ids == [watcher.pk]
    assert others.results == [{"trigger": "on_event", "event_key": "poke", "payload": wake.pk}]


@pytest.mark.django_db
def test_stop_on_a_one_shot_settles_it_as_fired(clock, sinks):
    from django_wakes.models import Outcome, WakeAttempt
    from django_wakes.sinks import Stop

    sinks(KIND, then=lambda wake, result: Stop(reason="done"))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    report = django_wakes.run_due()
    assert report.fired == 1
    assert report.outcomes == {wake.pk: Outcome.STOPPED}
    assert row(wake).state == State.FIRED
    assert list(WakeAttempt.objects.filter(wake_id=wake.pk).values_list("outcome", flat=True)) == [Outcome.STOPPED]
