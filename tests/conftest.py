"""Shared fixtures: an isolated sink registry, a fake clock, recording sinks and real processes.

Every test runs inside ``django_wakes.testing.isolated_sinks()`` (whatever it registers is forgotten
afterwards, and the unwakeable-wake log starts fresh), so tests never see each other's sinks or warnings.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_wakes.sinks import registry
from django_wakes.testing import FakeClock, fake_clock, isolated_sinks
from tests.processes import Procs, database_url

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_python() -> Iterator[None]:
    """Python's own SIGINT handler, as under a terminal, for the tests that send this process a real Ctrl-C.

    A suite started in the background by a non-interactive shell (a CI script's ``cmd &``, ``nohup``)
    inherits SIGINT *ignored*, and Python then installs no handler: the Ctrl-C those tests send
    would do nothing and they would fail for the environment, not the code.
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True)
def _isolated_sinks() -> Iterator[None]:
    """Forget the sinks a test registers (and bring back those it removes); clear the unwakeable log."""
    with isolated_sinks():
        yield


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    """A fake clock standing at 2030-01-01T00:00:00Z that everything in the engine follows."""
    with fake_clock(START) as fake:
        yield fake


class Calls(list):
    """The ``(wake_id, result)`` pairs a recording sink was called with, plus the wakes themselves."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.wakes: list[Any] = []

    @property
    def ids(self) -> list[int]:
        return [wake_id for wake_id, _ in self]

    @property
    def results(self) -> list[dict[str, Any]]:
        return [result for _, result in self]


Then = Callable[[Any, dict[str, Any]], Any] | BaseException | None


@pytest.fixture
def sinks() -> Callable[..., Calls]:
    """Return ``register(kind, then=None) -> calls``.

    ``register`` installs a sink for ``kind`` that appends ``(wake.pk, result)`` to the returned list
    and then, if ``then`` is given, raises it (an exception instance) or returns ``then(wake, result)``
    (a callable: its return value is what the sink returns, e.g. ``Retry`` or ``Defer``).
    """

    def register(kind: str, then: Then = None) -> Calls:
        calls = Calls(kind)

        def recording_sink(wake: Any, result: dict[str, Any]) -> Any:
            calls.append((wake.pk, result))
            calls.wakes.append(wake)
            if isinstance(then, BaseException):
                raise then
            if then is not None:
                return then(wake, result)
            return None

        registry.register(kind, recording_sink, replace=True)
        return calls

    return register


@pytest.fixture
def spawned(settings: Any) -> list[tuple[str, dict[str, Any]]]:
    """Point ``WAKES["SPAWN_TURN"]`` at a recorder and return its ``(session_id, result)`` calls."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def spawn_turn(session_id: str, result: dict[str, Any]) -> None:
        calls.append((session_id, result))

    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": spawn_turn}
    return calls


@pytest.fixture
def procs(transactional_db: None, tmp_path: Path) -> Iterator[Procs]:
    """Start real processes against the test database; kill and reap whatever is left at teardown.

    Depending on ``transactional_db`` (what a test writes is committed, so the children see it)
    makes this teardown run first, so no child still holds a connection or a lock when
    pytest-django flushes the tables.
    """
    url = database_url(connection.settings_dict)
    if url is None:
        pytest.skip("the test database is in memory: other processes cannot open it")
    manager = Procs(url, tmp_path)
    yield manager
    manager.cleanup()
