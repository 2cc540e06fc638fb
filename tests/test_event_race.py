"""A retained delivery and a ``since`` watch of one key, committing at the same moment in two processes,
fire the watch exactly once: the watch sees the retained event, or the delivery sees the watch —
never neither, never both. Real processes on PostgreSQL and MariaDB, thousands of pairs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

import django_wakes
from django_wakes.models import Wake

pytestmark = [pytest.mark.multiprocess, pytest.mark.django_db(transaction=True)]

PAIRS = int(os.environ.get("WAKES_RACE_PAIRS", "2000"))
WS = "ws-race"
KIND = "t.race"


def _child(work: Callable[[int], Any], barrier: Any, out: Path) -> None:
    """Run ``work(i)`` for every pair, each step released together with the other process."""
    code = 0
    try:
        results = []
        for i in range(PAIRS):
            barrier.wait(timeout=60)
            results.append(work(i))
        out.write_text(json.dumps(results))
    except BaseException:  # noqa: BLE001 - reported to the parent through the file and the exit code
        out.write_text(json.dumps({"error": traceback.format_exc()}))
        code = 1
    finally:
        connections.close_all()
        os._exit(code)


def _deliver(i: int) -> int:
    return django_wakes.deliver_event(workspace_id=WS, event_key=f"race-{i}", payload={"i": i}, retain="10m")


def _watch_since(since: datetime) -> Callable[[int], bool]:
    def watch(i: int) -> bool:
        wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_key=f"race-{i}", since=since)
        return wake.result is not None  # created already triggered by the retained event

    return watch


def test_a_retained_delivery_and_a_since_watch_racing_fire_the_watch_exactly_once(sinks, settings, tmp_path: Path):
    if connection.vendor == "sqlite":
        pytest.skip("the race needs a server database (SQLite serialises every writer behind one file lock)")
    sinks(KIND)
    settings.WAKES = {**settings.WAKES, "RETAIN_MAX": PAIRS}  # keep every pair's event (the children inherit it)
    since = datetime.now(UTC) - timedelta(minutes=1)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    delivered, watched = tmp_path / "delivered.json", tmp_path / "watched.json"
    connections.close_all()  # the children open their own connections
    children = [
        context.Process(target=_child, args=(_deliver, barrier, delivered)),
        context.Process(target=_child, args=(_watch_since(since), barrier, watched)),
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(300)
    outputs = [json.loads(path.read_text()) for path in (delivered, watched)]
    for child, output in zip(children, outputs, strict=True):
        assert child.exitcode == 0, output
    accepted, found_retained = outputs

    both = [i for i in range(PAIRS) if accepted[i] and found_retained[i]]
    neither = [i for i in range(PAIRS) if not accepted[i] and not found_retained[i]]
    assert neither == [], f"{len(neither)} watches missed their event, e.g. keys {neither[:5]}"
    assert both == [], f"{len(both)} events fired their watch twice, e.g. keys {both[:5]}"
    assert all(count in (0, 1) for count in accepted)

    wakes = {w.event_key: w for w in Wake.objects.filter(workspace_id=WS)}
    assert len(wakes) == PAIRS
    for i in range(PAIRS):
        wake = wakes[f"race-{i}"]
        assert wake.fire_at is not None and wake.result["payload"] == {"i": i}
    seen_first = sum(found_retained)
    print(
        f"\nevent race {connection.vendor}: {PAIRS} pairs, the watch saw the retained event in {seen_first}, "
        f"the delivery saw the watch in {PAIRS - seen_first}; none missed, none doubled"
    )
