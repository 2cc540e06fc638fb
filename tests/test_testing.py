"""``django_wakes.testing.isolated_sinks``: what a host project's tests rely on to keep sinks apart."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

import django_wakes
from django_wakes import engine
from django_wakes.testing import fake_clock, isolated_sinks


def noop(wake: Any, result: dict[str, Any]) -> None:
    return None


def other(wake: Any, result: dict[str, Any]) -> None:
    return None


def test_it_yields_the_registry_the_engine_fires_from():
    with isolated_sinks() as sinks:
        assert sinks is django_wakes.registry


def test_a_sink_registered_inside_is_forgotten_after():
    with isolated_sinks() as sinks:
        sinks.register("test.testing.inside", noop)
        assert django_wakes.registry.get("test.testing.inside") is noop
    assert django_wakes.registry.get("test.testing.inside") is None
    assert "test.testing.inside" not in django_wakes.registry.kinds()


def test_a_sink_removed_or_replaced_inside_comes_back():
    django_wakes.registry.register("test.testing.kept", noop)
    django_wakes.registry.register("test.testing.swapped", noop)
    with isolated_sinks() as sinks:
        sinks.unregister("test.testing.kept")
        sinks.register("test.testing.swapped", other, replace=True)
        assert sinks.get("test.testing.kept") is None
    assert django_wakes.registry.get("test.testing.kept") is noop
    assert django_wakes.registry.get("test.testing.swapped") is noop


def test_a_reset_inside_is_undone():
    before = django_wakes.registry.kinds()
    assert "demo.print" in before, "the testproject's autodiscovered sinks are registered"
    with isolated_sinks() as sinks:
        sinks.reset()
        assert "demo.print" not in sinks.kinds()
    assert django_wakes.registry.kinds() == before


def test_the_registry_is_restored_when_the_block_raises():
    with pytest.raises(RuntimeError), isolated_sinks() as sinks:
        sinks.register("test.testing.raised", noop)
        raise RuntimeError("test failed")
    assert django_wakes.registry.get("test.testing.raised") is None


def test_blocks_nest_each_restoring_what_it_found():
    with isolated_sinks() as outer:
        outer.register("test.testing.outer", noop)
        with isolated_sinks() as inner:
            inner.register("test.testing.inner", noop)
            inner.unregister("test.testing.outer")
            assert inner.get("test.testing.outer") is None
        assert outer.get("test.testing.outer") is noop
        assert outer.get("test.testing.inner") is None
    assert django_wakes.registry.get("test.testing.outer") is None


def test_the_unwakeable_warn_once_log_starts_fresh_inside_and_after(caplog: pytest.LogCaptureFixture):
    def warnings_for(rows: list[tuple[int, str]]) -> int:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="django_wakes"):
            engine.unwakeable_log.observe(rows)
        return sum(1 for r in caplog.records if r.levelno == logging.WARNING)

    rows = [(101, "test.testing.nobody")]
    assert warnings_for(rows) == 1
    assert warnings_for(rows) == 0, "warned once per kind, then quiet"
    with isolated_sinks():
        assert warnings_for(rows) == 1, "a fresh log inside the block"
        assert warnings_for(rows) == 0
    assert warnings_for(rows) == 1, "and a fresh log after it"


@pytest.mark.django_db
def test_the_documented_example_fires_a_sink_registered_inside():
    """docs/recurrence.md, "Keeping your tests' sinks apart"."""
    sent = []
    with isolated_sinks() as sinks, fake_clock(datetime(2030, 1, 7, 12, tzinfo=UTC)) as clock:
        sinks.register("digest", lambda wake, result: sent.append(wake.pk), replace=True)
        first = django_wakes.schedule(workspace_id="w1", kind="digest", cron="0 9 * * *", tz="Europe/Paris")
        clock.set(first.due_at)
        django_wakes.run_due()
    assert sent == [first.pk]
    assert django_wakes.registry.get("digest") is None
