"""factory-boy factories for rows the public API would not (easily) produce: settled, aged or odd rows.

Timestamps follow :func:`django_wakes.clock.now`, so inside the ``clock`` fixture they follow the
fake clock. Wakes created through the public API in tests go through ``schedule``/``watch``/...;
these factories are for arranging the database directly (gc, recovery, receipts).
"""

from __future__ import annotations

import secrets

import factory
from factory.django import DjangoModelFactory

from django_wakes import clock
from django_wakes.models import Outcome, Receipt, ReceiptState, State, TriggerType, Wake, WakeAttempt


class WakeFactory(DjangoModelFactory):
    class Meta:
        model = Wake

    workspace_id = factory.Sequence(lambda n: f"ws-{n}")
    session_id = None
    trigger_type = TriggerType.AT
    kind = "test.factory"
    serial_key = None
    intent = factory.LazyAttribute(lambda o: {"made_by": "factory"})
    state = State.PENDING
    fire_at = factory.LazyFunction(clock.now)
    due_at = factory.LazyAttribute(lambda o: o.fire_at)
    attempts = 0
    max_attempts = 5
    created_at = factory.LazyFunction(clock.now)
    updated_at = factory.LazyAttribute(lambda o: o.created_at)

    class Params:
        settled = factory.Trait(
            state=State.FIRED,
            due_at=None,
            attempts=1,
            result=factory.LazyAttribute(lambda o: {"trigger": "at"}),
            settled_at=factory.LazyAttribute(lambda o: o.updated_at),
        )


class WakeAttemptFactory(DjangoModelFactory):
    class Meta:
        model = WakeAttempt

    wake = factory.SubFactory(WakeFactory, settled=True)
    number = 1
    runner_id = "factory-runner"
    started_at = factory.LazyFunction(clock.now)
    finished_at = factory.LazyAttribute(lambda o: o.started_at)
    outcome = Outcome.FIRED
    error = ""


class ReceiptFactory(DjangoModelFactory):
    class Meta:
        model = Receipt

    session_id = "sess-1"
    key = factory.Sequence(lambda n: f"effect-{n}")
    state = ReceiptState.RUNNING
    result = None
    owner = factory.LazyFunction(lambda: secrets.token_hex(16))
    lease_until = factory.LazyFunction(clock.now)
    created_at = factory.LazyFunction(clock.now)
