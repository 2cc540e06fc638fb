"""``async def`` sinks are awaited to the end: their effects happen, their failures are attempts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import django_wakes
from django_wakes import Retry, sink
from django_wakes.models import Outcome, State, Wake, WakeAttempt

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-async"


def due(kind: str, **kwargs: Any) -> Wake:
    return django_wakes.schedule(workspace_id=WS, kind=kind, delay="0s", **kwargs)


def test_an_async_sink_runs_past_its_first_await():
    effects: list[tuple[int, str]] = []

    @sink("t.async.effect")
    async def effect(wake: Wake, result: dict[str, Any]) -> None:
        await asyncio.sleep(0.01)
        effects.append((wake.pk, "after the await"))

    wake = due("t.async.effect")
    report = django_wakes.run_due()
    assert report.fired == 1
    assert effects == [(wake.pk, "after the await")]
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED


def test_an_async_sink_can_use_the_async_orm():
    seen: list[str] = []

    @sink("t.async.orm")
    async def uses_orm(wake: Wake, result: dict[str, Any]) -> None:
        row = await Wake.objects.aget(pk=wake.pk)
        seen.append(row.state)

    due("t.async.orm")
    assert django_wakes.run_due().fired == 1
    assert seen == [State.FIRING]


def test_an_async_sink_that_raises_is_a_failed_attempt():
    @sink("t.async.fail")
    async def fails(wake: Wake, result: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("upstream down")

    wake = due("t.async.fail", max_attempts=1)
    report = django_wakes.run_due()
    assert report.failed == 1 and report.dead == 1
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.DEAD and "upstream down" in row.last_error
    assert WakeAttempt.objects.get(wake_id=wake.pk).outcome == Outcome.FAILED


def test_an_async_sink_can_return_an_outcome():
    @sink("t.async.retry")
    async def retries(wake: Wake, result: dict[str, Any]) -> Retry:
        await asyncio.sleep(0)
        return Retry(reason="not yet")

    wake = due("t.async.retry")
    assert django_wakes.run_due().failed == 1
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.PENDING and row.last_error == "not yet"


def test_an_async_spawn_turn_hook_is_awaited(settings):
    turns: list[str] = []

    async def spawn_turn(session_id: str, result: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        turns.append(session_id)

    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": spawn_turn}
    django_wakes.schedule(workspace_id=WS, session_id="s-1", delay="0s")
    assert django_wakes.run_due().fired == 1
    assert turns == ["s-1"]
